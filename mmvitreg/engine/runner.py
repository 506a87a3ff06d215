"""mmengine's Runner with checked checkpoint loading, atomic saving and the training guards."""
import logging
from typing import Optional

import torch
from mmengine.dist import master_only
from mmengine.hooks import CheckpointHook, EMAHook
from mmengine.model import is_model_wrapper
from mmengine.runner import Runner

from mmvitreg.registry import RUNNERS
from .checkpoint import (ATOMIC_BACKEND, POLICIES, CheckpointError, check_copy, first_readable, fit, is_local,
                         load_checkpoint_file, normalise_checkpoint, remove_stale_temporaries, resume_candidates)
from .hooks import LossGuardHook, RNGStateHook, unwrap_model
from .resume_diff import resume_changes

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
      *partial*: the keys that fit are loaded, whatever their share. *backbone* also stops at a backbone parameter
      of the checkpoint the backbone has no place for (talking heads in a model without them; not a module its
      options leave out, as a final norm), naming the config that takes it. *backbone* and *partial* log one line
      with the counts of matched, missing, unexpected and resized keys (derived buffers not counted).
      ``tools/test.py`` loads strictly; ``--allow-partial`` (``tools/test.py``, ``tools/train.py``) makes the
      load partial. An ``EMAHook`` (mmengine's, mmpretrain's or a subclass) fills its EMA copy itself, by its own
      rule, from the same converted, revised checkpoint; the copy is then checked against the file by the same
      policy, so ``tools/test.py`` scores what mmengine's Runner scores and never an EMA copy that did not load.
    * **Resuming**: a weights-only file stops with one line naming ``load_from``; what the config changes
      against the checkpoint's (``meta['cfg']``) is one warning naming what the resumed state overrides and what
      the resume cannot honour; an interrupted save's temporaries are removed.
    * **Saving**: checkpoints and ``last_checkpoint`` are written to a temporary file and moved
      over the final name (:class:`~mmvitreg.engine.checkpoint.AtomicLocalBackend`), so a killed
      process never leaves a truncated file under a checkpoint's name; the next save removes the temporaries of
      one that was killed.
    * **Auto-resume** (``--resume`` without a file): the newest checkpoint that reads; an
      unreadable newest one is skipped with a warning naming it.
    * **Hooks**: :class:`~mmvitreg.engine.hooks.RNGStateHook` (exact resume) and
      :class:`~mmvitreg.engine.hooks.LossGuardHook` (stop at a non-finite loss) are added unless
      the config already has them.
    * **compile**: ``compile=True`` (or a dict of ``torch.compile`` options) compiles ``model.loss``, the training
      forward (:func:`compile_loss`); mmengine 0.10 compiles the whole ``train_step``, optimizer step included,
      where dynamo fails (``Adam.step``).
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
        """As :meth:`Runner.load_checkpoint`, through the one pass: read ``filename`` (:func:`load_checkpoint_file`:
        its keys revised by ``revise_keys``, an official release converted), run the ``after_load_checkpoint`` hooks
        (each ``EMAHook`` fills its copy by its own rule: mmengine's, mmpretrain's or a subclass's), load the model
        by the checkpoint policy (``resume`` while resuming, else ``load_from``; ``strict=True`` always strict) and
        check every EMA copy against the file by the same policy (:func:`check_copy`; nothing is loaded twice).
        Resuming, a weights-only file stops with one line naming ``load_from``, and what the config changes
        against the checkpoint's is one warning (:func:`~mmvitreg.engine.resume_diff.resume_changes`).

        Raises:
            CheckpointError: the file cannot be read, holds no training state to resume, or the load breaks the
                policy (the model's or an EMA copy's).
        """
        if self._preloaded is not None and self._preloaded[0] == filename:
            checkpoint = normalise_checkpoint(self._preloaded[1], filename, self.logger, revise_keys)
            self._preloaded = None
        else:
            checkpoint = load_checkpoint_file(filename, map_location, logger=self.logger, rules=revise_keys)
        purpose = 'resume' if self._resuming else 'load_from'
        if self._resuming:
            self._check_resumable(filename, checkpoint)
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)
        policy = 'strict' if strict else self.checkpoint_policy[purpose]
        # after the hooks: resuming, EMAHook swaps the model's and its copy's weights in the checkpoint
        report = fit(unwrap_model(self.model), checkpoint['state_dict'], filename, checkpoint, policy, _HINTS[purpose])
        for hook in self.hooks:
            if isinstance(hook, EMAHook) and hasattr(hook, 'ema_model'):
                check_copy(hook.ema_model.module, checkpoint, filename, policy, _HINTS[purpose],
                           f"{type(hook).__name__}'s EMA copy of")
        self.logger.log(logging.INFO if report.clean else logging.WARNING,
                        f'{purpose} {filename}: {report.describe()}')
        self._has_loaded = True
        return checkpoint

    def _check_resumable(self, filename: str, checkpoint: dict) -> None:
        """Stop at a file without a training state (one line naming ``load_from``); warn once about what the
        config changes against the checkpoint's (``meta['cfg']``); remove an interrupted save's temporaries."""
        meta = checkpoint.get('meta') or {}
        if 'iter' not in meta or 'epoch' not in meta:
            raise CheckpointError(
                f'--resume {filename}: a weights-only file (no epoch / iter in its meta: not saved by a training '
                f'run), so there is nothing to resume; start a new training from its weights with '
                f'load_from={filename} (tools/train.py CONFIG --cfg-options load_from={filename})')
        removed = remove_stale_temporaries(self.work_dir) if is_local(self.work_dir) else []
        if removed:
            self.logger.info(f'resume: removed {len(removed)} temporary file(s) of an interrupted save: '
                             f'{", ".join(removed)}')
        if isinstance(meta.get('cfg'), str):
            changes = resume_changes(meta['cfg'], self.cfg, filename, meta['iter'], meta['epoch'],
                                     len(self.train_loop.dataloader))
            if changes:
                self.logger.warning(changes)

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

    def _maybe_compile(self, target: str) -> None:
        """As :meth:`Runner._maybe_compile`, but ``train_step`` stays eager and ``model.loss`` is compiled."""
        options = self.cfg.get('compile', None)
        if target != 'train_step' or options is None or options is False:
            return super()._maybe_compile(target)
        compile_loss(self.model, **({} if options is True else dict(options)))
        self.logger.info('model.loss has been compiled (the optimizer step stays eager); the first iterations will '
                         'be slow.')

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


def compile_loss(model: torch.nn.Module, **options) -> torch.nn.Module:
    """Compile ``model.loss`` (the training forward: backbone, trace users and losses; mmpretrain, mmseg and mmdet
    models all route ``mode='loss'`` there) with ``torch.compile(**options)``, in place; a wrapped model (DDP,
    mmengine's wrappers) has its inner module's ``loss`` compiled. Returns ``model``."""
    inner = model
    while is_model_wrapper(inner):
        inner = inner.module
    inner.loss = torch.compile(inner.loss, **options)
    return model
