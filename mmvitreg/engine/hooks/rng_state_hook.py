"""Save and restore the random number generators with the checkpoint, so a resumed run is exact."""

import random
from functools import partial
from typing import Optional

import numpy as np
import torch
from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import Hook

from mmvitreg.registry import HOOKS


def capture_rng_state() -> dict:
    """The state of every global generator a training step draws from: Python's ``random``, NumPy's (MixToken,
    mmpretrain's Mixup/CutMix, augmentations), torch's CPU generator (drop path, dropout, the loader's base seed) and,
    when present, every CUDA device's."""
    state = dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """Put back a state of :func:`capture_rng_state`."""
    random.setstate(state['python'])
    np.random.set_state(state['numpy'])
    torch.set_rng_state(state['torch'])
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state['cuda'])


def train_sampler(loader) -> Optional[object]:
    """The sampler of a training data loader that draws its order from a ``seed`` (mmengine's ``DefaultSampler``
    and ``InfiniteSampler``, mmpretrain's ``RepeatAugSampler``), given as ``sampler`` or inside a batch sampler
    (mmdet's); None if it has none."""
    for sampler in (getattr(loader, 'sampler', None), getattr(getattr(loader, 'batch_sampler', None), 'sampler', None)):
        if isinstance(getattr(sampler, 'seed', None), int):
            return sampler
    return None


def follow_seed(runner, sampler_seed: int) -> None:
    """Put the resumed run's training data on the checkpoint's seed: the sampler draws the order from
    ``sampler_seed`` and ``worker_init_fn`` seeds the workers from ``runner.seed`` (the checkpoint's, set by mmengine's
    resume); an order or an iterator made at build time (``InfiniteSampler``, ``IterBasedTrainLoop``) is made again."""
    loop = runner.train_loop
    loader, sampler = loop.dataloader, train_sampler(loop.dataloader)
    init = loader.worker_init_fn
    reseed = isinstance(init, partial) and 'seed' in init.keywords and init.keywords['seed'] != runner.seed
    if reseed:
        loader.worker_init_fn = partial(init.func, *init.args, **{**init.keywords, 'seed': runner.seed})
    if sampler is not None and sampler.seed != sampler_seed:
        sampler.seed = sampler_seed
        if hasattr(sampler, '_indices_of_rank'):  # mmengine's InfiniteSampler: its order is drawn when built
            sampler.indices = sampler._indices_of_rank()
        reseed = True
    if reseed and hasattr(loop, 'dataloader_iterator'):  # mmengine's IterBasedTrainLoop
        loop.dataloader_iterator = type(loop.dataloader_iterator)(loader)


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Makes ``--resume`` continue with the random draws the uninterrupted run would have made.

    mmengine 0.10.7 checkpoints hold the seed but not the generators' states, so a resumed run draws other MixToken
    boxes, drop-path masks and augmentations than the run it continues. This hook

    * saves ``rng_state`` (:func:`capture_rng_state`, one per rank) in every checkpoint and, on resume, restores it,
      each rank its own, just before the first resumed training iteration (after mmengine has re-seeded);
    * saves the training sampler's seed and, on resume, gives the run's data order the checkpoint's seed
      (:func:`follow_seed`): the sampler and the workers were built with the config's;
    * keeps validation from drawing from the training generators, so the draws do not depend on how often a run
      validates (a resumed run skips the validation right after the checkpoint).

    N iterations + resume to 2N then equals 2N straight, bit for bit on CPU with deterministic settings, when the
    checkpoint falls at an epoch end (mmengine's iter-based loop re-reads the batches it skips) and the data loader
    has no persistent workers (their generators live in the worker processes).
    """

    priority = 'HIGH'  # before CheckpointHook (VERY_LOW) captures in after_train_*

    def __init__(self):
        # every rank's state (distributed), the state to restore, the state before validation, the sampler's seed
        self._rank_states = self._pending = self._before_val = self._sampler_seed = None

    def _gather(self):
        if get_world_size() > 1:  # checkpoints are saved on rank 0 only: collect every rank's state
            self._rank_states = all_gather_object(capture_rng_state())

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._gather()

    def after_train_epoch(self, runner) -> None:
        self._gather()

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        # a checkpoint saved during validation (mmengine's CheckpointHook saves the epoch's checkpoint again when
        # `save_best` finds a new best) holds the training stream, as it was before validation drew from it
        if get_world_size() > 1 and self._rank_states is not None:
            checkpoint['rng_state'] = dict(ranks=self._rank_states)
        else:
            checkpoint['rng_state'] = dict(ranks=[self._before_val or capture_rng_state()])
        sampler = train_sampler(runner.train_loop.dataloader)
        if sampler is not None:
            checkpoint['rng_state']['sampler_seed'] = sampler.seed

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        ranks = checkpoint.get('rng_state', {}).get('ranks')
        if not runner._resume:
            return  # load_from (fine-tuning) starts its own random stream
        if ranks is None:
            runner.logger.warning(
                'the checkpoint holds no random-generator state (saved without RNGStateHook): the '
                'resumed run draws different random numbers than an uninterrupted run would'
            )
            return
        if len(ranks) != get_world_size():
            runner.logger.warning(
                f'the checkpoint holds the random-generator states of {len(ranks)} process(es) but '
                f'this run has {get_world_size()}: each rank restores the state of rank (its rank '
                f'mod {len(ranks)})'
            )
        self._pending = ranks[get_rank() % len(ranks)]
        self._sampler_seed = checkpoint['rng_state'].get('sampler_seed')
        seeds = (checkpoint.get('meta') or {}).get('seed'), runner.cfg.get('randomness', {}).get('seed')
        if self._sampler_seed is None and seeds[0] != seeds[1]:
            runner.logger.warning(
                "the checkpoint does not record its sampler's seed (saved by an older mmvitreg): "
                "the data order follows this run's randomness.seed, not the checkpoint's"
            )
        loader = runner.cfg.get('train_dataloader') or {}
        if loader.get('num_workers', 0) > 0 and loader.get('persistent_workers', False):
            runner.logger.warning(
                'resuming with persistent data-loader workers: their random generators are not part '
                'of the checkpoint, so random augmentations differ from an uninterrupted run '
                '(persistent_workers=False makes them reproducible)'
            )

    def before_train(self, runner) -> None:
        # after Runner.resume, which may re-seed every generator
        if self._pending is not None:
            restore_rng_state(self._pending)
            self._pending = None
        if self._sampler_seed is not None:
            follow_seed(runner, self._sampler_seed)
            self._sampler_seed = None

    def before_val(self, runner) -> None:
        self._before_val = capture_rng_state()

    def after_val(self, runner) -> None:
        if self._before_val is not None:
            restore_rng_state(self._before_val)
            self._before_val = None
