"""Save and restore the random number generators with the checkpoint, so a resumed run is exact."""
import logging
import random
from functools import partial
from typing import Optional

import numpy as np
import torch
from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log

from mmvitreg.registry import HOOKS


def capture_rng_state() -> dict:
    """The state of every global generator a training step draws from: Python's ``random``,
    NumPy's legacy global generator (MixToken's ``lam`` and box, mmpretrain's Mixup/CutMix,
    random augmentations), torch's CPU generator (drop path, dropout, the data loader's base seed,
    ``randperm`` partners) and, when present, every CUDA device's."""
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
    ``sampler_seed``, the one the checkpoint's run drew it from, and mmengine's ``worker_init_fn`` seeds the workers
    from ``runner.seed`` (the checkpoint's, which :meth:`~mmengine.runner.Runner.resume` has set). An order drawn
    when the sampler was built (``InfiniteSampler``) is drawn again, and an iteration-based loop's iterator, made when
    the loop was built, made again."""
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

    mmengine 0.10.7 checkpoints hold the weights, optimizer, schedulers and the seed, but not the
    generators' states, so a resumed run re-seeds and draws different MixToken boxes, drop-path
    masks and augmentations than the run it continues. This hook

    * adds ``rng_state`` (:func:`capture_rng_state`; one per rank in a distributed run) to every
      checkpoint, captured where the checkpoint is saved;
    * on resume, restores it just before the first resumed training iteration (after mmengine has
      re-seeded), each rank its own;
    * records the training sampler's seed (``rng_state['sampler_seed']``: the data order) and, on resume, gives it
      back to the sampler, and the checkpoint's seed to the data-loader workers' seeding: mmengine's resume re-seeds
      the run with the checkpoint's ``seed`` (:meth:`~mmengine.runner.Runner.resume`), but the sampler and the
      workers' ``worker_init_fn`` were built with the config's, so a resume with another ``randomness.seed`` (or
      ``seed=None``) drew another data order; the whole resumed run now follows the checkpoint's seed;
    * keeps validation from consuming the training generators (state saved before validation and
      put back after), so the random draws of training do not depend on how often it validates -
      a resumed run skips the validation the uninterrupted one ran right after the checkpoint.

    With it, N iterations + resume to 2N equals 2N straight, bit for bit on CPU with deterministic
    settings, when the checkpoint falls at an epoch end (epoch-based loops; mmengine's iter-based
    loop re-reads the batches it skips on resume) and the data loader has no persistent workers
    (their generators live in worker processes; with ``num_workers=0`` or non-persistent workers
    every draw is made in, or seeded from, the main process). :class:`GuardedRunner` registers
    this hook for every run of ``tools/train.py``.
    """

    priority = 'HIGH'  # before CheckpointHook (VERY_LOW) captures in after_train_*

    def __init__(self):
        self._rank_states: Optional[list] = None
        self._pending: Optional[dict] = None
        self._before_val: Optional[dict] = None
        self._sampler_seed: Optional[int] = None

    # ---- saving
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

    # ---- resuming
    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        ranks = checkpoint.get('rng_state', {}).get('ranks')
        if not runner._resume:
            return  # load_from (fine-tuning) starts its own random stream
        if ranks is None:
            print_log('the checkpoint holds no random-generator state (saved without RNGStateHook): the resumed '
                      'run draws different random numbers than an uninterrupted run would',
                      logger='current', level=logging.WARNING)
            return
        if len(ranks) != get_world_size():
            print_log(f'the checkpoint holds the random-generator states of {len(ranks)} process(es) but this run '
                      f'has {get_world_size()}: each rank restores the state of rank (its rank mod {len(ranks)})',
                      logger='current', level=logging.WARNING)
        self._pending = ranks[get_rank() % len(ranks)]
        self._sampler_seed = checkpoint['rng_state'].get('sampler_seed')
        if self._sampler_seed is None and (checkpoint.get('meta') or {}).get('seed') != runner.cfg.get(
                'randomness', {}).get('seed'):
            print_log("the checkpoint does not record its sampler's seed (saved by an older mmvitreg): the data order "
                      "follows this run's randomness.seed, not the checkpoint's", logger='current',
                      level=logging.WARNING)
        loader = runner.cfg.get('train_dataloader') or {}
        if loader.get('num_workers', 0) > 0 and loader.get('persistent_workers', False):
            print_log('resuming with persistent data-loader workers: their random generators are not part of the '
                      'checkpoint, so random augmentations differ from an uninterrupted run '
                      '(persistent_workers=False makes them reproducible)', logger='current', level=logging.WARNING)

    def before_train(self, runner) -> None:
        # after Runner.resume, which may re-seed every generator
        if self._pending is not None:
            restore_rng_state(self._pending)
            self._pending = None
        if self._sampler_seed is not None:
            follow_seed(runner, self._sampler_seed)
            self._sampler_seed = None

    # ---- validation does not draw from the training stream
    def before_val(self, runner) -> None:
        self._before_val = capture_rng_state()

    def after_val(self, runner) -> None:
        if self._before_val is not None:
            restore_rng_state(self._before_val)
            self._before_val = None
