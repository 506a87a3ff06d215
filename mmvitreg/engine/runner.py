"""mmengine's Runner with checked checkpoint loading, atomic saving and the training guards."""

import os
import os.path as osp
import re
from contextlib import suppress
from typing import List, Optional

import torch
from mmengine.dist import master_only
from mmengine.hooks import CheckpointHook, EMAHook
from mmengine.model import BaseTTAModel
from mmengine.optim import OptimWrapper, OptimWrapperDict
from mmengine.runner import EpochBasedTrainLoop, Runner
from mmengine.runner.checkpoint import find_latest_checkpoint

from mmvitreg.fileio import read_checkpoint, remove_stale_temporaries
from mmvitreg.models.converters import convert_checkpoint
from mmvitreg.registry import RUNNERS

from .checkpoint import ATOMIC_BACKEND, POLICIES, CheckpointError, is_local, load_converted, non_finite
from .hooks import LossGuardHook, NonFiniteLossError, RNGStateHook, unwrap_model
from .resume_diff import resume_changes

_HINTS = {
    'load_from': 'pass --allow-partial to load the keys that fit anyway',
    'resume': 'resume needs a checkpoint of this very config; pass --allow-partial to resume anyway',
}


@RUNNERS.register_module()
class GuardedRunner(Runner):
    """mmengine's :class:`~mmengine.runner.Runner`, never silently wrong about checkpoints or losses
    (``tools/train.py`` and ``tools/test.py`` build every run with it).

    * **Checkpoints**: loaded through the one pass of :mod:`mmvitreg.engine.checkpoint` by the config's
      ``checkpoint_policy`` (:meth:`load_checkpoint`), EMA copies included; a resume is checked
      (:meth:`_check_resumable`); ``--resume`` without a file takes the newest checkpoint that reads
      (:func:`resume_candidates`). Saved atomically (:class:`~mmvitreg.engine.checkpoint.AtomicLocalBackend`), never
      with weights that are not finite (:meth:`call_hook`).
    * **Hooks**: :class:`~mmvitreg.engine.hooks.RNGStateHook` and :class:`~mmvitreg.engine.hooks.LossGuardHook` are
      added unless the config has them.
    * **compile**: ``compile=True`` (or ``torch.compile`` options) compiles ``model.loss`` only (:func:`compile_loss`):
      mmengine 0.10 compiles the whole ``train_step``, where dynamo fails on ``Adam.step``.
    * **Randomness**: ``randomness.diff_rank_seed`` defaults to True: each rank draws its own mixing boxes, drop-path
      masks and augmentations, as the official codes do; the sampler's seed stays shared, so the shards stay disjoint.

    Attributes:
        last_finite_checkpoint (str | None): the last checkpoint this run wrote or resumed from that resumes (finite
            weights, optimizer and schedulers saved), None before the first.
    """

    def __init__(self, *args, randomness: Optional[dict] = None, **kwargs):
        randomness = dict(randomness or dict(seed=None))
        randomness.setdefault('diff_rank_seed', True)
        super().__init__(*args, randomness=randomness, **kwargs)
        policy = {'load_from': 'backbone', 'resume': 'strict', **(self.cfg.get('checkpoint_policy') or {})}
        for key, value in policy.items():
            if key not in _HINTS or value not in POLICIES:
                raise ValueError(f'checkpoint_policy takes load_from / resume = one of {POLICIES}, got {policy}')
        self.checkpoint_policy = policy
        self._resuming = False
        self.last_finite_checkpoint = self._saving = None
        present = {type(h) for h in self.hooks}
        for hook in (RNGStateHook, LossGuardHook):
            if hook not in present:
                self.register_hook(hook())
        for hook in self.hooks:  # the hook's removals and its last_checkpoint go through the atomic backend too
            if isinstance(hook, CheckpointHook) and hook.backend_args is None and hook.file_client_args is None:
                hook.backend_args = dict(backend=ATOMIC_BACKEND) if is_local(hook.out_dir or self.work_dir) else None

    def load_checkpoint(
        self, filename: str, map_location='cpu', strict: bool = False, revise_keys: list = [(r'^module.', '')]
    ) -> dict:
        """As :meth:`Runner.load_checkpoint`, through the one pass of :mod:`mmvitreg.engine.checkpoint` by the
        ``resume`` or ``load_from`` policy (``strict=True``: strict); the ``after_load_checkpoint`` hooks run before
        the fit (an ``EMAHook`` fills its copy by its own rule, then the copy is compared with the file); resuming,
        :meth:`_check_resumable`. Raises a one-line :class:`CheckpointError`."""
        purpose = 'resume' if self._resuming else 'load_from'
        policy, hint = 'strict' if strict else self.checkpoint_policy[purpose], _HINTS[purpose]
        emas = [hook for hook in self.hooks if isinstance(hook, EMAHook) and hasattr(hook, 'ema_model')]

        def after_read(checkpoint: dict) -> None:  # an EMA hook swaps each module.<key> with state_dict[<key>]
            ema, weights = checkpoint.get('ema_state_dict') or {}, checkpoint['state_dict']
            unpaired = [k for k in ema if k.startswith('module.') and k.removeprefix('module.') not in weights]
            if emas and unpaired:
                raise CheckpointError(
                    f'checkpoint {filename}: its ema_state_dict has {len(unpaired)} weights its '
                    f'state_dict lacks (first: {unpaired[0]}), which {type(emas[0]).__name__} '
                    'cannot pair; use a checkpoint an EMA hook saved, or drop the hook '
                    '(custom_hooks=[])'
                )
            self.call_hook('after_load_checkpoint', checkpoint=checkpoint)

        copies = [(hook.ema_model.module, type(hook).__name__) for hook in emas]
        checkpoint = convert_checkpoint(read_checkpoint(filename, map_location), filename, revise_keys, self.logger)
        load_converted(
            unwrap_model(self.model), checkpoint, filename, policy, hint, purpose, after_read, copies, self.logger
        )
        if self._resuming:  # after the fit: a checkpoint of another model is named as such first
            self._check_resumable(filename, checkpoint)
        self._has_loaded = True
        return checkpoint

    def _check_resumable(self, filename: str, checkpoint: dict) -> None:
        """Stop with one line at a file without a training state, without the optimizer's or the schedulers'
        (:meth:`lacking_state`), trained beyond ``train_cfg.max_epochs`` (``max_iters``), or at a change the resumed
        state cannot follow (:func:`resume_changes`, :meth:`_unfollowed_state`); warn once about the other changes;
        remove an interrupted save's temporaries."""
        meta = checkpoint.get('meta') or {}
        fresh = (
            f'start a new training from its weights with load_from={filename} (tools/train.py CONFIG '
            f'--cfg-options load_from={filename})'
        )
        if 'iter' not in meta or 'epoch' not in meta:
            raise CheckpointError(
                f'--resume {filename}: a weights-only file (no epoch / iter in its meta: not saved '
                f'by a training run), so there is nothing to resume; {fresh}'
            )
        lacking = self.lacking_state(checkpoint)
        if lacking:
            other = self._resumable_instead(filename)
            instead = f'resume from {other}, which holds them, or ' if other else ''
            raise CheckpointError(
                f'--resume {filename}: it holds no {" and no ".join(lacking)} state (mmengine saves '
                'its best checkpoints without them), so the optimizer and the schedulers would '
                f'start afresh; {instead}{fresh}'
            )
        loop = self.train_loop
        done, limit, unit = (
            (meta['epoch'], loop.max_epochs, 'epochs')
            if isinstance(loop, EpochBasedTrainLoop)
            else (meta['iter'], loop.max_iters, 'iters')
        )
        if done > limit:
            raise CheckpointError(
                f'--resume {filename}: it has trained {done} {unit}, more than train_cfg.max_{unit}='
                f'{limit}, so nothing would train; set train_cfg.max_{unit} above {done} to train '
                'on, or evaluate it with tools/test.py'
            )
        if done == limit:
            self.logger.warning(
                f'--resume {filename}: it has trained all train_cfg.max_{unit}={limit} {unit} '
                f'already, so nothing trains; set train_cfg.max_{unit} above {done} to train on'
            )
        removed = remove_stale_temporaries(self.work_dir) if is_local(self.work_dir) else []
        if removed:
            self.logger.info(
                f'resume: removed {len(removed)} temporary file(s) of an interrupted save: {", ".join(removed)}'
            )
        notes = []
        if 'ema_state_dict' in checkpoint and not any(isinstance(h, EMAHook) for h in self.hooks):
            notes.append(
                "this config has no EMA hook, so the run continues from the file's state_dict, which holds "
                "the EMA copy its hook saved, not from the trained weights (its ema_state_dict) that the "
                'optimizer state belongs to; keep the hook to continue from those'
            )
        refused, warning = resume_changes(meta.get('cfg'), self.cfg, notes)
        refused += self._unfollowed_state(checkpoint)
        if refused:
            raise CheckpointError(
                f'--resume {filename}: the resumed state does not fit the new config: '
                f'{"; ".join(refused)}; resume with the checkpoint\'s settings, or {fresh}'
            )
        if warning:
            self.logger.warning(f'resume {filename}: {warning}')

    def lacking_state(self, checkpoint: dict) -> List[str]:
        """The training states this run resumes that ``checkpoint`` lacks: ``optimizer``, and ``param_schedulers``
        when the config has schedulers (mmengine's best checkpoints, ``save_optimizer=False`` ones hold neither)."""
        needed = ['optimizer'] + (['param_schedulers'] if self.param_schedulers else [])
        return [key for key in needed if key not in checkpoint]

    def _resumable_instead(self, filename: str) -> Optional[str]:
        """The newest checkpoint of ``filename``'s folder or of the work dir (:func:`resume_candidates`) that reads
        and holds every state :meth:`lacking_state` asks for; None when there is none."""
        folders = dict.fromkeys(
            osp.abspath(folder) for folder in (osp.dirname(filename), self.work_dir) if is_local(folder)
        )
        for path in (path for folder in folders for path in resume_candidates(folder)):
            with suppress(CheckpointError):  # a file that does not read is no candidate
                if osp.abspath(path) != osp.abspath(filename) and not self.lacking_state(read_checkpoint(path)):
                    return path
        return None

    def _unfollowed_state(self, checkpoint: dict) -> List[str]:
        """What the built run cannot take of the file's optimizer and scheduler states: parameter groups of other
        sizes (``paramwise_cfg`` added or removed; torch raises a ValueError), or a new epoch length while a scheduler
        converted from epochs (``convert_to_iter_based``) still has the old epochs' iterations to count."""
        found, saved, wrapper = [], checkpoint.get('optimizer'), self.optim_wrapper
        if isinstance(saved, dict) and isinstance(wrapper, OptimWrapper):
            several = isinstance(wrapper, OptimWrapperDict)
            for state, built in [(saved[k], w) for k, w in wrapper.items()] if several else [(saved, wrapper)]:
                was = [len(group['params']) for group in state['param_groups']]
                now = [len(group['params']) for group in built.optimizer.param_groups]
                if was != now:
                    found.append(
                        f'the optimizer state has {len(was)} parameter groups, the new optimizer '
                        f'{len(now)} (optim_wrapper.paramwise_cfg makes them)'
                    )
        info = (checkpoint.get('message_hub') or {}).get('runtime_info', {})
        configs, states = self.cfg.get('param_scheduler') or [], checkpoint.get('param_schedulers')
        configs = [configs] if isinstance(configs, dict) else configs
        if isinstance(self.train_loop, EpochBasedTrainLoop) and info.get('max_epochs') and isinstance(states, list):
            was, now = info['max_iters'] // info['max_epochs'], len(self.train_loop.dataloader)
            ends = [state.get('end', 0) for cfg, state in zip(configs, states) if cfg.get('convert_to_iter_based')]
            ends = [end for end in ends if end > checkpoint['meta']['iter']]
            if was != now and ends:
                found.append(
                    f'an epoch is now {now} iterations (was {was}; train_dataloader), while the resumed '
                    f'schedulers count the old epochs\' iterations up to iteration {max(ends)}'
                )
        return found

    def resume(self, filename: str, *args, **kwargs) -> None:
        """As :meth:`Runner.resume`, loading by the ``resume`` policy (strict unless allowed)."""
        self._resuming = True
        try:
            super().resume(filename, *args, **kwargs)
        finally:
            self._resuming = False
        self.last_finite_checkpoint = filename  # the load pass refuses weights that are not finite

    def load_or_resume(self) -> None:
        """As :meth:`Runner.load_or_resume`; ``resume=True`` without ``load_from`` takes the newest checkpoint of the
        work dir that reads, skipping unreadable newer ones with a warning."""
        if self._has_loaded or not (self._resume and self._load_from is None):
            return super().load_or_resume()
        found = first_readable(resume_candidates(self.work_dir), warn=self.logger.warning)
        if found is None:
            self.logger.info(f'--resume auto: no checkpoint in {self.work_dir}; training from the start')
            return
        self.logger.info(f'--resume auto: resuming from {found}')
        self.resume(found)

    def _maybe_compile(self, target: str) -> None:
        """As :meth:`Runner._maybe_compile`, but ``train_step`` stays eager and ``model.loss`` is compiled."""
        options = self.cfg.get('compile', None)
        if target != 'train_step' or options is None or options is False:
            return super()._maybe_compile(target)
        compile_loss(self.model, **({} if options is True else dict(options)))
        self.logger.info(
            'model.loss has been compiled (the optimizer step stays eager); the first iterations will be slow.'
        )

    @master_only
    def save_checkpoint(
        self, out_dir, filename, file_client_args=None, save_optimizer=True, save_param_scheduler=True, **kwargs
    ) -> None:
        """As :meth:`Runner.save_checkpoint`; a local file is written atomically, weights that are not all finite
        are not written (:meth:`call_hook`); a file saved with the optimizer's and schedulers' states (one that
        resumes) becomes :attr:`last_finite_checkpoint`."""
        if file_client_args is None and kwargs.get('backend_args') is None and is_local(out_dir):
            kwargs['backend_args'] = dict(backend=ATOMIC_BACKEND)
        self._saving = osp.join(out_dir, filename)
        super().save_checkpoint(out_dir, filename, file_client_args, save_optimizer, save_param_scheduler, **kwargs)
        if save_optimizer and (save_param_scheduler or not self.param_schedulers):  # not a best checkpoint
            self.last_finite_checkpoint = self._saving

    def call_hook(self, fn_name: str, **kwargs) -> None:
        """As :meth:`Runner.call_hook`, with two additions.

        * After ``before_run``: an ``EMAHook`` that copied the TTA wrapper (``tools/test.py --tta``), whose keys no
          file has, gets the models inside, so it fills its copy from the file and tests the EMA weights.
        * After the last ``before_save_checkpoint`` hook (an EMA hook's swap included): a checkpoint whose
          ``state_dict`` or ``ema_state_dict`` holds a NaN or an infinity stops the run unwritten (the check reads
          the CPU copies mmengine is about to save: no device synchronisation): a :class:`NonFiniteLossError` naming
          the first such tensor and :attr:`last_finite_checkpoint`.
        """
        super().call_hook(fn_name, **kwargs)
        if fn_name == 'before_run':  # under --tta an EMA hook copied the TTA wrapper: it keeps the model it wraps
            for hook in self.hooks:
                if isinstance(hook, EMAHook) and isinstance(getattr(hook, 'src_model', None), BaseTTAModel):
                    hook.src_model, hook.ema_model.module = hook.src_model.module, hook.ema_model.module.module
        if fn_name != 'before_save_checkpoint':
            return
        checkpoint = kwargs['checkpoint']
        bad = non_finite(checkpoint['state_dict'], checkpoint.get('ema_state_dict') or {})
        if bad:
            raise NonFiniteLossError(
                f"non-finite weights after iteration {checkpoint['meta']['iter']}: {bad[0]} holds NaN or infinite "
                f'values ({len(bad)} tensors do), although every loss was finite; {self._saving} is not written and '
                f'the run stops; {LossGuardHook.last_finite(self)} ({LossGuardHook.hint(self.model)})'
            )


def compile_loss(model: torch.nn.Module, **options) -> None:
    """Compile ``model.loss`` (the training forward of mmpretrain, mmseg and mmdet models), inside any wrapper, with
    ``torch.compile(**options)``, in place."""
    inner = unwrap_model(model)
    inner.loss = torch.compile(inner.loss, **options)


_STEP = re.compile(r'^(?:epoch|iter)_(\d+)\.pth$')


def resume_candidates(work_dir: str) -> List[str]:
    """Checkpoints ``--resume auto`` may resume from, newest first: the one ``last_checkpoint`` names, then
    ``epoch_N.pth`` / ``iter_N.pth`` of ``work_dir`` by decreasing ``N``."""
    named = find_latest_checkpoint(work_dir)
    candidates = [named] if named else []
    if osp.isdir(work_dir):
        steps = [(int(m.group(1)), name) for name in os.listdir(work_dir) if (m := _STEP.match(name))]
        for _, name in sorted(steps, reverse=True):
            path = osp.join(work_dir, name)
            if not any(osp.abspath(path) == osp.abspath(c) for c in candidates):
                candidates.append(path)
    return candidates


def first_readable(candidates: List[str], warn) -> Optional[str]:
    """The first candidate that reads as a checkpoint, ``warn(message)`` for each one skipped; None when there is no
    candidate, a :class:`CheckpointError` when none reads."""
    problems = []
    for path in candidates:
        try:
            read_checkpoint(path)
            return path
        except CheckpointError as e:
            problems.append(str(e))
            warn(f'--resume auto: skipping {path}, which cannot be read ({e}); trying the previous checkpoint')
    if problems:
        raise CheckpointError('--resume auto: no readable checkpoint to resume from: ' + ' | '.join(problems))
    return None
