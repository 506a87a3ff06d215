"""mmengine's Runner with checked checkpoint loading, atomic saving and the training guards."""
import logging
import re
from collections import OrderedDict
from typing import Iterator, Optional, Tuple

from mmengine.dist import master_only
from mmengine.hooks import CheckpointHook, EMAHook
from mmengine.runner import Runner
from torch import nn

from mmvitreg.registry import RUNNERS
from .checkpoint import (ATOMIC_BACKEND, POLICIES, first_readable, fit, is_local, load_checkpoint_file,
                         normalise_checkpoint, resume_candidates)
from .hooks import LossGuardHook, RNGStateHook, unwrap_model

_HINTS = {
    'load_from': 'pass --allow-partial to load the keys that fit anyway',
    'resume': 'resume needs a checkpoint of this very config; pass --allow-partial to resume anyway',
}


@RUNNERS.register_module()
class GuardedRunner(Runner):
    """mmengine's :class:`~mmengine.runner.Runner`, never silently wrong about checkpoints or losses.

    What it changes (``tools/train.py`` and ``tools/test.py`` build every run with it):

    * **Reading** a checkpoint: a missing, empty, truncated or non-checkpoint file stops the run
      with one :class:`~mmvitreg.engine.checkpoint.CheckpointError` line naming the file and the
      problem (mmengine: a bare ``UnpicklingError``).
    * **Converting** an official release (LV-ViT, DeepViT, DiversePatch, timm DeiT / TL-Align, Swin;
      raw or wrapped) on load, with one log line naming its layout
      (:func:`~mmvitreg.engine.checkpoint.load_checkpoint_file`).
    * **Loading** it into the model, by the config's ``checkpoint_policy``:
      ``dict(load_from='backbone', resume='strict')`` by default. *strict*: any missing, unexpected
      or size-mismatched key (after the modules' load-time hooks, e.g. position-embedding resize)
      stops the run, naming the file and the first keys of each kind; *backbone*: the keys that fit
      are loaded, but a load that fills less than
      :data:`~mmvitreg.engine.checkpoint.MIN_BACKBONE_SHARE` of the backbone's tensors (a checkpoint
      of another model, no key matched) stops the run, naming the file and the layout it looks like;
      *partial*: the keys that fit are loaded, whatever their share. *backbone* also stops at a parameter of
      the checkpoint the model has no place for (a talking-heads file in a model without them), naming the
      config that takes it. *backbone* and *partial* log one line with the counts of matched, missing,
      unexpected and resized keys (derived buffers such as ``num_batches_tracked`` not counted).
      ``tools/test.py`` loads strictly; ``--allow-partial`` (``tools/test.py``, ``tools/train.py``) makes the
      load partial. mmengine's ``EMAHook`` copy is loaded from the same converted, ``module.``-free keys and
      checked by the same policy, so ``tools/test.py`` never evaluates an EMA copy that did not load.
    * **Saving**: checkpoints and ``last_checkpoint`` are written to a temporary file and moved
      over the final name (:class:`~mmvitreg.engine.checkpoint.AtomicLocalBackend`), so a killed
      process never leaves a truncated file under a checkpoint's name.
    * **Auto-resume** (``--resume`` without a file): the newest checkpoint that reads; an
      unreadable newest one is skipped with a warning naming it.
    * **Hooks**: :class:`~mmvitreg.engine.hooks.RNGStateHook` (exact resume) and
      :class:`~mmvitreg.engine.hooks.LossGuardHook` (stop at a non-finite loss) are added unless
      the config already has them.
    * **Randomness**: ``randomness.diff_rank_seed`` defaults to True, so every rank seeds its
      generators with ``seed + rank`` and draws its own mixing boxes, drop-path masks and
      augmentations, as the official codes do (``seed + rank``); mmengine's default draws the same
      box on every GPU. The data sampler's seed is still shared by all ranks (mmengine broadcasts
      it), so the shards stay disjoint. ``randomness.diff_rank_seed=False`` restores mmengine's.

    Args: as :class:`~mmengine.runner.Runner` (``randomness`` by keyword); the policy is the config's
    ``checkpoint_policy``.
    """

    def __init__(self, *args, randomness: Optional[dict] = None, **kwargs):
        randomness = dict(randomness or dict(seed=None))
        randomness.setdefault('diff_rank_seed', True)
        super().__init__(*args, randomness=randomness, **kwargs)
        policy = dict(load_from='backbone', resume='strict')
        policy.update(self.cfg.get('checkpoint_policy') or {})
        for key, value in policy.items():
            if key not in _HINTS or value not in POLICIES:
                raise ValueError(f'checkpoint_policy takes load_from / resume = one of {POLICIES}, got {policy}')
        self.checkpoint_policy = policy
        self._resuming = False
        self._preloaded = None
        present = {type(h) for h in self.hooks}
        for hook in (RNGStateHook, LossGuardHook):
            if hook not in present:
                self.register_hook(hook())
        for hook in self.hooks:
            if (isinstance(hook, CheckpointHook) and hook.backend_args is None and hook.file_client_args is None
                    and is_local(hook.out_dir or self.work_dir)):
                hook.backend_args = dict(backend=ATOMIC_BACKEND)

    def load_checkpoint(self, filename: str, map_location='cpu', strict: bool = False,
                        revise_keys: list = [(r'^module.', '')]) -> dict:
        """Read ``filename`` (:func:`load_checkpoint_file`: an official release is converted, ``module.``
        dropped), revise its keys, run the ``after_load_checkpoint`` hooks on it (``EMAHook`` loads its copy)
        and load the state dict into the model and every EMA copy by the checkpoint policy (``resume`` while
        resuming, else ``load_from``; ``strict=True`` always loads strictly).

        Raises:
            CheckpointError: the file cannot be read, or the load breaks the policy (the model's or an
                EMA copy's).
        """
        if self._preloaded is not None and self._preloaded[0] == filename:
            checkpoint, self._preloaded = normalise_checkpoint(self._preloaded[1], filename, self.logger), None
        else:
            checkpoint = load_checkpoint_file(filename, map_location, logger=self.logger)
        state_dict = checkpoint['state_dict']
        metadata = getattr(state_dict, '_metadata', OrderedDict())
        for pattern, replacement in revise_keys:
            state_dict = OrderedDict((re.sub(pattern, replacement, k), v) for k, v in state_dict.items())
        state_dict._metadata = metadata
        checkpoint['state_dict'] = state_dict  # what the hooks (EMAHook's copy) read too
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)

        purpose = 'resume' if self._resuming else 'load_from'
        policy = 'strict' if strict else self.checkpoint_policy[purpose]
        model = unwrap_model(self.model)  # as mmengine's loader
        # after the hooks: resuming, EMAHook swaps the model's and its copy's weights in the checkpoint
        report = fit(model, checkpoint['state_dict'], filename, checkpoint, policy, _HINTS[purpose])
        for ema_copy, weights in self._ema_copies(checkpoint):
            fit(ema_copy, weights, filename, checkpoint, policy, _HINTS[purpose], what="EMAHook's EMA copy of")
        self.logger.log(logging.INFO if report.clean else logging.WARNING,
                        f'{purpose} {filename}: {report.describe()}')
        self._has_loaded = True
        return checkpoint

    def _ema_copies(self, checkpoint: dict) -> Iterator[Tuple[nn.Module, dict]]:
        """Each ``EMAHook``'s copy and the weights its ``after_load_checkpoint`` gave it (mmengine's rule: the
        ``ema_state_dict`` when resuming from a checkpoint that has one, else the model's ``state_dict``)."""
        for hook in self.hooks:
            if isinstance(hook, EMAHook) and hasattr(hook, 'ema_model'):
                if 'ema_state_dict' in checkpoint and self._resume:
                    yield hook.ema_model, checkpoint['ema_state_dict']
                else:
                    yield hook.ema_model.module, checkpoint['state_dict']

    def resume(self, filename: str, *args, **kwargs) -> None:
        """As :meth:`Runner.resume`, loading by the ``resume`` policy (strict unless allowed)."""
        self._resuming = True
        try:
            super().resume(filename, *args, **kwargs)
        finally:
            self._resuming = False

    def load_or_resume(self) -> None:
        """As :meth:`Runner.load_or_resume`; ``resume=True`` without ``load_from`` takes the newest
        checkpoint of the work dir that reads, skipping unreadable newer ones with a warning."""
        if self._has_loaded or not (self._resume and self._load_from is None):
            return super().load_or_resume()
        found = first_readable(resume_candidates(self.work_dir), warn=self.logger.warning)
        if found is None:
            self.logger.info(f'--resume auto: no checkpoint in {self.work_dir}; training from the start')
            return
        self._preloaded = found
        self.logger.info(f'--resume auto: resuming from {found[0]}')
        self.resume(found[0])
        self._has_loaded = True

    @master_only
    def save_checkpoint(self, out_dir: str, filename: str, file_client_args=None, save_optimizer: bool = True,
                        save_param_scheduler: bool = True, meta=None, by_epoch: bool = True,
                        backend_args=None) -> None:
        """As :meth:`Runner.save_checkpoint`; a local file is written atomically."""
        if file_client_args is None and backend_args is None and is_local(out_dir):
            backend_args = dict(backend=ATOMIC_BACKEND)
        super().save_checkpoint(out_dir, filename, file_client_args=file_client_args, save_optimizer=save_optimizer,
                                save_param_scheduler=save_param_scheduler, meta=meta, by_epoch=by_epoch,
                                backend_args=backend_args)
