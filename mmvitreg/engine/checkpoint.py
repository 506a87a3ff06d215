"""Checkpoints that are never silently wrong: mmvitreg's loading design, told here once.

mmengine 0.10.7 reads a checkpoint with a bare ``torch.load`` (a truncated file: an ``UnpicklingError`` naming no
file), loads non-strictly with one warning per key (``tools/test.py`` given another model's checkpoint scores a
half-random model) and writes in place (a killed save leaves a truncated file). Every checkpoint mmvitreg's tools
and models read goes through one pass instead:

1. **read** (:func:`read_checkpoint`): local or remote, unpickled with ``weights_only=True`` and an allow-list
   (:func:`mmvitreg.fileio.load_checkpoint`); a bad file is one :class:`CheckpointError` line naming it;
2. **revise and convert** (:func:`normalise_checkpoint`): DDP's ``module.`` dropped, an official release (LV-ViT,
   DeepViT, DiversePatch, timm DeiT / TL-Align, Swin) converted with one log line, non-finite weights refused;
3. **fit and judge** (:func:`fit`): mmengine's ``load_state_dict`` walk (load-time hooks such as position-embedding
   resize run) gives a :class:`KeyReport`, judged by a policy: *strict* (every key fits), *backbone*
   (:func:`check_fit`) or *partial* (whatever fits); one log line ``{purpose} {file}: {report}``. An ``EMAHook``'s
   copy, filled by the hook, is only checked (:func:`check_copy`).

Callers and policies: :class:`~mmvitreg.engine.runner.GuardedRunner` (``checkpoint_policy``, default
``dict(load_from='backbone', resume='strict')``; ``tools/test.py`` strict; ``--allow-partial``), :class:`Pretrained`
(``init_cfg``: *backbone*; through ``mmvitreg.compat``, mmengine's ``load_checkpoint``, inferencers and plain
runners: *strict*, :func:`partial_loading` the opt-out), :func:`load_weights` (analysis tools, ONNX
export: *strict*, ``--allow-partial``) and ``tools/model_converters/``. Saving: :class:`AtomicLocalBackend`.
"""
import logging
import os
import os.path as osp
import re
from collections import OrderedDict
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from mmengine.fileio import LocalBackend, get_local_path, register_backend
from mmengine.logging import print_log
from mmengine.model.weight_init import PretrainedInit, update_init_info
from mmengine.runner.checkpoint import load_state_dict as mmengine_load_state_dict
from torch import nn

import mmvitreg.models.backbones  # noqa: F401  (registers the DeepViT, LV-ViT and Swin release layouts)
from mmvitreg.fileio import UnsafeCheckpointError, atomic_write, load_checkpoint, remove_stale_temporaries
from mmvitreg.models.converters import (REVISE_KEYS, convert_official, detect_layout, revise_keys, unwrap_checkpoint,
                                       where_keys_belong)
from mmvitreg.registry import WEIGHT_INITIALIZERS
from .hooks.unwrap import unwrap_model

#: name of the atomic local backend in mmengine's file-backend registry
ATOMIC_BACKEND = 'mmvitreg_atomic_local'
#: how many keys of each kind an error message lists
SHOWN_KEYS = 5
#: the least share of the backbone's tensors a ``load_from`` / ``init_cfg`` load must fill (else an error)
MIN_BACKBONE_SHARE = 0.9
#: buffers a model derives rather than learns (a step counter, constant index tables and masks): never counted
#: as matched, missing or unexpected, so a checkpoint with or without them fits the same
DERIVED_BUFFERS = ('num_batches_tracked', 'relative_position_index', 'attn_mask')
#: the load policies (``checkpoint_policy`` of a config, :func:`fit`)
POLICIES = ('strict', 'backbone', 'partial')


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and what is wrong."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f'{type(e).__name__}: {text[0].split(". ")[0]}' if text else type(e).__name__  # its first sentence


def is_local(path) -> bool:
    """A file path, not a URL (``https://``, ``s3://``, ...)."""
    return '://' not in str(path)


def is_derived(key: str) -> bool:
    """Whether ``key`` names a buffer of :data:`DERIVED_BUFFERS`."""
    return key.rsplit('.', 1)[-1] in DERIVED_BUFFERS


def _read_local(path: str, name: str, map_location, unsafe: Optional[bool]) -> dict:
    if not osp.isfile(path):
        raise CheckpointError(f'checkpoint {name}: no such file')
    size = osp.getsize(path)
    if size == 0:
        raise CheckpointError(f'checkpoint {name}: empty file (0 bytes), e.g. a save that was interrupted')
    try:
        checkpoint = load_checkpoint(path, map_location, name=name, unsafe=unsafe)
    except UnsafeCheckpointError as e:  # its message names the file, the global and the opt-in
        raise CheckpointError(str(e)) from None
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for damaged files
        raise CheckpointError(f'checkpoint {name}: not a readable PyTorch checkpoint ({size} bytes; truncated '
                              f'or another format): {_first_line(e)}') from None
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f'checkpoint {name}: holds a {type(checkpoint).__name__}, not a checkpoint '
                              '(a dict with a state_dict, or a state dict)')
    try:
        state_dict = unwrap_checkpoint(checkpoint)
    except KeyError:
        state_dict = {}
    if not any(isinstance(v, torch.Tensor) for v in state_dict.values()):
        raise CheckpointError(f'checkpoint {name}: holds no tensors (keys: {sorted(checkpoint)[:SHOWN_KEYS]}); '
                              'not a model checkpoint')
    return checkpoint


def read_checkpoint(filename: str, map_location='cpu', unsafe: Optional[bool] = None) -> dict:
    """Step 1 of the pass: read ``filename``, local or remote (fetched by ``mmengine.fileio.get_local_path``),
    unpickled by :func:`mmvitreg.fileio.load_checkpoint` (the allow-list unless ``unsafe`` or ``--unsafe-load``).

    Raises:
        CheckpointError: the file cannot be fetched, is missing, empty, truncated, not a PyTorch checkpoint dict, or
            names a global outside the allow-list.
    """
    filename = str(filename)
    if is_local(filename):
        return _read_local(filename, filename, map_location, unsafe)
    with ExitStack() as stack:
        try:
            local = stack.enter_context(get_local_path(filename))
        except Exception as e:  # no backend for the prefix, a network or permission error, ...
            raise CheckpointError(f"checkpoint {filename}: cannot be fetched through mmengine's file backends "
                                  f'({_first_line(e)}); download it and give the local path') from None
        return _read_local(local, filename, map_location, unsafe)


def non_finite(*state_dicts: dict) -> List[str]:
    """The keys of the floating-point tensors of ``state_dicts`` holding a NaN or an infinity: one ``isfinite().all()``
    per tensor, stacked into one flag vector that the host reads once."""
    tensors = [(k, v) for sd in state_dicts for k, v in sd.items() if torch.is_tensor(v) and v.is_floating_point()]
    finite = torch.stack([torch.isfinite(v).all() for _, v in tensors]) if tensors else torch.ones(0, dtype=torch.bool)
    return [] if bool(finite.all()) else [tensors[i][0] for i in (~finite).nonzero().flatten().tolist()]


def normalise_checkpoint(checkpoint: dict, filename: str, logger='current', rules: Sequence = REVISE_KEYS) -> dict:
    """Step 2 of the pass: ``checkpoint`` in mmengine's form, its keys revised by ``rules``
    (:func:`~mmvitreg.models.converters.revise_keys`), an official release converted (one log line).

    Raises:
        CheckpointError: no state dict, a release its converter cannot convert (naming the keys), or weights that are
            not finite (:func:`non_finite` of ``state_dict`` and ``ema_state_dict``; no opt-out).
    """
    try:
        converted, layout = convert_official(checkpoint, rules)
    except KeyError as e:
        raise CheckpointError(f'checkpoint {filename}: {e.args[0]}') from None
    except ValueError as e:
        layout = detect_layout(revise_keys(unwrap_checkpoint(checkpoint), rules))
        raise CheckpointError(f'checkpoint {filename} looks like the {layout.name} release layout but does not '
                              f'convert: {e}') from None
    bad = non_finite(converted['state_dict'], converted.get('ema_state_dict') or {})
    if bad:
        raise CheckpointError(f'checkpoint {filename}: {bad[0]} holds NaN or infinite values ({len(bad)} tensors do): '
                              'the training had diverged when it was saved; use an earlier checkpoint')
    if layout is not None:
        converted['meta'] = dict(official_layout=layout.name, official_model=layout.model)
        print_log(f'checkpoint {filename}: {layout.name} release layout, converted on load by '
                  f'{layout.convert.__module__}.{layout.convert.__name__} (as `python {layout.tool} SRC DST` '
                  'does offline)', logger=logger)
    return converted


def load_checkpoint_file(filename: str, map_location=None, logger='current', rules: Sequence = REVISE_KEYS) -> dict:
    """Steps 1-2 of the pass: :func:`read_checkpoint`, then :func:`normalise_checkpoint`. Not mmengine's
    ``CheckpointLoader``: mmseg's and mmdet's Swin read official files through it and convert them themselves."""
    return normalise_checkpoint(read_checkpoint(filename, map_location), filename, logger, rules)


def _shown(keys: List[str]) -> str:
    more = f', ... ({len(keys) - SHOWN_KEYS} more)' if len(keys) > SHOWN_KEYS else ''
    return ', '.join(keys[:SHOWN_KEYS]) + more


@dataclass
class KeyReport:
    """How a state dict fitted a model: ``matched`` (checkpoint keys loaded), ``missing`` (model keys the file
    lacks), ``unexpected`` (file keys the model lacks), ``resized`` (key -> (file shape, model shape), still
    different after the load-time hooks; not loaded) and ``errors`` (other errors of the modules). Derived buffers
    (:data:`DERIVED_BUFFERS`) are in no list."""

    matched: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)
    resized: Dict[str, Tuple[tuple, tuple]] = field(default_factory=dict)
    errors: List[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Every model key loaded from a key of the same shape, nothing left over."""
        return not (self.missing or self.unexpected or self.resized or self.errors)

    def summary(self) -> str:
        """``N matched, N missing, N unexpected, N resized`` (one line)."""
        return (f'{len(self.matched)} matched, {len(self.missing)} missing, {len(self.unexpected)} unexpected, '
                f'{len(self.resized)} resized keys')

    def describe(self) -> str:
        """The summary and the first keys of each kind that did not fit (one line)."""
        parts = []
        if self.missing:
            parts.append(f'missing: {_shown(self.missing)}')
        if self.unexpected:
            parts.append(f'unexpected: {_shown(self.unexpected)}')
        if self.resized:
            parts.append('size mismatch: ' + _shown(
                [f'{k} {list(c)} in the checkpoint vs {list(m)} in the model' for k, (c, m) in self.resized.items()]))
        parts += [f'error: {e}' for e in self.errors[:SHOWN_KEYS]]
        return self.summary() + ('; ' + '; '.join(parts) if parts else '')


_SIZE_MISMATCH = re.compile(r'size mismatch for (\S+): copying a param with shape torch\.Size\((\[.*?\])\) from '
                            r'checkpoint, the shape in current model is torch\.Size\((\[.*?\])\)')
#: the lines of mmengine's message that the key lists already hold
_MMENGINE_LINES = ('The model and loaded state dict do not match', 'unexpected key in source', 'missing keys in source')


def _shape(text: str) -> tuple:
    return tuple(int(d) for d in re.findall(r'\d+', text))


class _Messages(logging.Logger):
    """A logger that keeps what it is given (the message :func:`mmengine.runner.checkpoint.load_state_dict` logs)."""

    def __init__(self):
        super().__init__('mmvitreg.load_state_dict')
        self.messages = []

    def log(self, level, msg, *args, **kwargs):
        self.messages.append(str(msg))


def load_state_dict_checked(model: nn.Module, state_dict: Dict[str, torch.Tensor]) -> KeyReport:
    """Copy ``state_dict`` into ``model`` wherever it fits (mmengine's non-strict
    :func:`~mmengine.runner.checkpoint.load_state_dict`, so load-time pre- and post-hooks run) and report what did
    not: a post-hook on ``model`` hears mmengine's missing / unexpected lists, the message it logs the size
    mismatches (rank 0 only: another rank lists none, and rank 0's error stops the run)."""
    found = {}
    model = unwrap_model(model)  # mmengine's walk starts inside the wrappers: the post-hook goes where it starts
    handle = model.register_load_state_dict_post_hook(lambda module, keys: found.update(keys=keys))
    messages = _Messages()
    try:
        mmengine_load_state_dict(model, state_dict, strict=False, logger=messages)
    finally:
        handle.remove()
    keys = found['keys']
    report = KeyReport(missing=[k for k in keys.missing_keys if not is_derived(k)],
                       unexpected=[k for k in keys.unexpected_keys if not is_derived(k)])
    for line in '\n'.join(messages.messages).splitlines():
        m = _SIZE_MISMATCH.search(line)
        if m:
            report.resized[m.group(1)] = (_shape(m.group(2)), _shape(m.group(3)))
        elif line.strip() and not line.startswith(_MMENGINE_LINES):
            report.errors.append(line.strip())
    skipped = set(report.unexpected) | set(report.resized)
    report.matched = [k for k in state_dict if not is_derived(k) and k not in skipped]
    return report


def _looks_like(checkpoint: dict, state_dict: Dict[str, torch.Tensor]) -> str:
    meta = checkpoint.get('meta') or {}
    if 'official_layout' in meta:
        return f'the {meta["official_layout"]} release layout, converted on load for {meta["official_model"]}'
    prefixes = sorted({k.split('.', 1)[0] for k in state_dict})
    if 'backbone' in prefixes:
        return f'a checkpoint of another model (top-level modules: {", ".join(prefixes[:SHOWN_KEYS])})'
    return f'a state dict of no known layout (first keys: {_shown(list(state_dict))})'


def check_fit(model: nn.Module, report: KeyReport, filename: str, checkpoint: dict, hint: str) -> None:
    """The *backbone* policy: raise unless the load filled :data:`MIN_BACKBONE_SHARE` of the backbone's
    tensors (``model.backbone``, else the model) and dropped no backbone parameter of the file but those its options
    leave out (``left_out``, e.g. a final norm); the error names the keys and what takes them
    (:func:`~mmvitreg.models.converters.where_keys_belong`). The rest of the model may differ.

    Raises:
        CheckpointError: naming the file, what does not fit, the layout the file looks like and ``hint``.
    """
    backbone = model.backbone if hasattr(model, 'backbone') else model
    prefix = 'backbone.' if backbone is not model else ''
    keys = [k for k in model.state_dict() if not is_derived(k) and k.startswith(prefix)]
    empty = set(report.missing) | set(report.resized)
    filled = sum(k not in empty for k in keys)
    state_dict = checkpoint.get('state_dict', checkpoint)
    if not keys or filled < MIN_BACKBONE_SHARE * len(keys):
        raise CheckpointError(
            f'checkpoint {filename} does not fit the model {type(model).__name__}: it would fill {filled} of the '
            f'{len(keys)} backbone tensors (at least {MIN_BACKBONE_SHARE:.0%} needed; {report.summary()}); the file '
            f'looks like {_looks_like(checkpoint, state_dict)}. Use a checkpoint of this architecture or a config '
            f'built for this one; {hint}')
    left_out = tuple(f'{prefix}{name}.' for name in getattr(backbone, 'left_out', ()))
    dropped = [k for k in report.unexpected if k.startswith(prefix) and not k.startswith(left_out)]
    if dropped:
        takers = where_keys_belong(dropped)
        belong = '; '.join(takers) or f'another model (the file looks like {_looks_like(checkpoint, state_dict)})'
        raise CheckpointError(
            f'checkpoint {filename} has {len(dropped)} parameters the model {type(model).__name__} has no '
            f'place for ({_shown(dropped)}): without them it would not compute what was trained. They '
            f'belong to {belong}: use that config; {hint}')


def fit(model: nn.Module, checkpoint: dict, filename: str, policy: str, hint: str, purpose: Optional[str] = None,
        what: str = 'the model', report: Optional[KeyReport] = None, logger='current') -> KeyReport:
    """Step 3 of the pass: load ``checkpoint['state_dict']`` into ``model`` (:func:`load_state_dict_checked`), or
    take the ``report`` of a copy already filled (:func:`check_copy`); judge it by ``policy``; given a ``purpose``,
    log the load's one line, ``{purpose} {filename}: {report.describe()}`` (INFO if clean, else WARNING).

    Raises:
        CheckpointError: the load breaks the policy (the message names the file, ``what`` was loaded and ``hint``).
    """
    if policy not in POLICIES:
        raise ValueError(f'a load policy is one of {POLICIES}, not {policy!r}')
    if report is None:
        report = load_state_dict_checked(model, checkpoint['state_dict'])
    if policy == 'strict' and not report.clean:
        raise CheckpointError(f'checkpoint {filename} does not fit {what} {type(model).__name__} '
                              f'({report.describe()}); {hint}')
    if policy == 'backbone':
        check_fit(model, report, filename, checkpoint, hint)
    if purpose:
        print_log(f'{purpose} {filename}: {report.describe()}', logger=logger,
                  level=logging.INFO if report.clean else logging.WARNING)
    return report


def check_copy(copy: nn.Module, checkpoint: dict, filename: str, policy: str, hint: str,
               what: str = "EMAHook's EMA copy of") -> KeyReport:
    """Check, loading nothing, that ``copy`` (an ``EMAHook``'s ``ema_model.module``, filled by the hook's own
    rule) holds the file's weights: each tensor equal to the same key's in ``checkpoint['state_dict']`` or its
    ``ema_state_dict`` (``module.`` dropped); one found in neither is *missing*, one of another shape *resized*, and
    :func:`fit` judges the report by ``policy``.

    Raises:
        CheckpointError: the copy breaks the policy (the message names the file, ``what`` was checked and ``hint``).
    """
    sources = [checkpoint['state_dict']]
    if isinstance(checkpoint.get('ema_state_dict'), dict):
        sources.append(revise_keys(checkpoint['ema_state_dict']))
    report = KeyReport()
    for key, tensor in copy.state_dict().items():
        if is_derived(key):
            continue
        given = [source[key] for source in sources if isinstance(source.get(key), torch.Tensor)]
        if any(g.shape == tensor.shape and torch.equal(g.to(tensor.device), tensor) for g in given):
            report.matched.append(key)
        elif given and all(g.shape != tensor.shape for g in given):
            report.resized[key] = (tuple(given[0].shape), tuple(tensor.shape))
        else:
            report.missing.append(key)
    return fit(copy, checkpoint, filename, policy, hint, what=what, report=report)


def load_weights(model: nn.Module, filename: str, policy: str = 'strict', prefix: Optional[str] = None,
                 map_location='cpu', hint: str = 'use a checkpoint of this model', logger='current',
                 purpose: str = 'weights') -> KeyReport:
    """The whole pass for a tool or an init: read and convert ``filename`` (:func:`load_checkpoint_file`), keep
    the keys under ``prefix`` (without it) and :func:`fit` them into ``model`` by ``policy`` (one log line).

    Raises:
        CheckpointError: the file cannot be read, holds no key under ``prefix``, or breaks the policy.
    """
    checkpoint = load_checkpoint_file(filename, map_location, logger=logger)
    state_dict = checkpoint['state_dict']
    if prefix:
        prefix = prefix if prefix.endswith('.') else prefix + '.'
        selected = OrderedDict((k[len(prefix):], v) for k, v in state_dict.items() if k.startswith(prefix))
        if not selected:
            raise CheckpointError(f"checkpoint {filename} has no key under the prefix='{prefix}'; the file "
                                  f'looks like {_looks_like(checkpoint, state_dict)}; {hint}')
        purpose, state_dict = f"{purpose} (prefix='{prefix}')", selected
    return fit(model, {**checkpoint, 'state_dict': state_dict}, filename, policy, hint, purpose, logger=logger)


_INIT_HINT = ("check init_cfg's checkpoint and prefix (prefix='backbone.' loads a classifier checkpoint's backbone "
              'into a backbone); load_from with --allow-partial loads whatever fits')


@WEIGHT_INITIALIZERS.register_module(name='Pretrained')
class Pretrained(PretrainedInit):
    """``init_cfg=dict(type='Pretrained', _scope_='mmvitreg', checkpoint=..., prefix=...)``: mmengine's
    ``PretrainedInit`` through the one pass (:func:`load_weights`, the *backbone* policy). mmvitreg's backbones get it
    for ``type='Pretrained'`` too (:func:`~mmvitreg.models.backbones.init_cfg.own_pretrained`); other models only
    with ``_scope_`` (mmengine and mmpretrain keep loaded weights only for ``type='Pretrained'``)."""

    def __call__(self, module: nn.Module) -> None:
        load_weights(module, self.checkpoint, 'backbone', self.prefix, self.map_location, _INIT_HINT,
                     purpose='init_cfg')
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())

    @staticmethod
    def load_checkpoint_dict(model: nn.Module, checkpoint: dict, strict: bool = False,
                             revise_keys: Sequence = REVISE_KEYS) -> dict:
        """mmengine's ``_load_checkpoint_to_model`` for models holding an mmvitreg module (through
        ``mmvitreg.compat``: ``load_checkpoint``, inferencers, plain runners): steps 2-3 on a read ``checkpoint``,
        *strict* whatever ``strict`` says, *partial* inside :func:`partial_loading`.

        Raises:
            CheckpointError: the checkpoint does not convert or does not fill the model (naming the opt-out).
        """
        name = 'given to load_checkpoint'
        checkpoint = normalise_checkpoint(checkpoint, name, rules=revise_keys)
        fit(model, checkpoint, name, 'partial' if _PARTIAL.get() else 'strict', _INFERENCE_HINT, 'checkpoint')
        return checkpoint


#: whether :func:`partial_loading` is active (inference from a checkpoint that does not fill the model)
_PARTIAL = ContextVar('mmvitreg_partial_loading', default=False)
_INFERENCE_HINT = ("mmengine's loaders fill an mmvitreg model only from a file that fills every parameter: use a "
                   'checkpoint of this config, or load the keys that fit inside '
                   "`with mmvitreg.engine.partial_loading():` (a training: mmvitreg's tools/train.py, whose load_from "
                   'takes what fits the backbone)')


@contextmanager
def partial_loading() -> Iterator[None]:
    """Inside it, :meth:`Pretrained.load_checkpoint_dict` loads by the *partial* policy, with one warning::

        with mmvitreg.engine.partial_loading():
            inferencer = ImageClassificationInferencer(config, pretrained=checkpoint_of_another_head)
    """
    token = _PARTIAL.set(True)
    try:
        yield
    finally:
        _PARTIAL.reset(token)


class AtomicLocalBackend(LocalBackend):
    """mmengine's :class:`LocalBackend` writing through :func:`mmvitreg.fileio.atomic_write`: a killed write
    leaves at most a hidden ``.<name>.*.tmp`` (the next write of any run on that host removes it once its writer has
    died; another live run's stay: :func:`~mmvitreg.fileio.remove_stale_temporaries`), never a truncated file under
    the final name.
    A file it is asked to remove (``max_keep_ckpts``, the old best) goes when the next write into its folder completes,
    so a failed or refused save never costs the previous checkpoint."""

    #: folder -> files to remove at its next completed write (shared: the hook removes, the runner writes)
    pending: Dict[str, List[str]] = {}

    def remove(self, filepath) -> None:
        path = osp.abspath(str(filepath))
        self.pending.setdefault(osp.dirname(path), []).append(path)

    def put(self, obj: bytes, filepath) -> None:
        path = osp.abspath(str(filepath))
        atomic_write(path, lambda f: f.write(obj))
        for doomed in self.pending.pop(osp.dirname(path), []):
            if doomed != path and osp.isfile(doomed):
                os.remove(doomed)
        remove_stale_temporaries(osp.dirname(path))

    def put_text(self, obj: str, filepath, encoding: str = 'utf-8') -> None:
        self.put(obj.encode(encoding), filepath)


register_backend(ATOMIC_BACKEND, AtomicLocalBackend, force=True)
