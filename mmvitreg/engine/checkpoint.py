"""Checkpoints that are never silently wrong: mmvitreg's loading design, told here once.

mmengine 0.10.7 loads non-strictly with one warning per key (``tools/test.py`` given another model's checkpoint
scores a half-random model) and writes in place (a killed save leaves a truncated file). Every checkpoint mmvitreg's
tools and models read goes through one pass instead, each stage one function:

1. **read** (:func:`mmvitreg.fileio.read_checkpoint`): bounded, ``weights_only``; a bad file is one
   :class:`CheckpointError` line naming it;
2. **convert** (:func:`mmvitreg.models.converters.convert_checkpoint`): DDP's ``module.`` dropped, official releases
   converted;
3. **fit** (:func:`fit`): the values checked (:func:`check_values`), then mmengine's ``load_state_dict`` (load-time
   hooks run) and a :class:`KeyReport` of what loaded;
4. **judge** (:func:`judge`): the report by a policy, *strict*, *backbone* or *partial*; one log line.

Callers: :class:`~mmvitreg.engine.runner.GuardedRunner` (``checkpoint_policy``), :class:`Pretrained` (``init_cfg``),
:func:`fill_model` (mmengine's loaders, through ``mmvitreg.compat``) and :func:`load_weights` (tools). Saving:
:class:`AtomicLocalBackend`.
"""

import logging
import os
import os.path as osp
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from mmengine.fileio import LocalBackend, register_backend
from mmengine.logging import print_log
from mmengine.model.weight_init import PretrainedInit, update_init_info
from mmengine.runner.checkpoint import load_state_dict as mmengine_load_state_dict
from torch import nn

import mmvitreg.models.backbones  # noqa: F401  (registers the DeepViT, LV-ViT and Swin release layouts)
from mmvitreg.fileio import CheckpointError, atomic_write, read_checkpoint, remove_stale_temporaries
from mmvitreg.models.converters import REVISE_KEYS, convert_checkpoint, where_keys_belong
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
#: the load policies (``checkpoint_policy`` of a config, :func:`judge`)
POLICIES = ('strict', 'backbone', 'partial')
#: the tensor dtypes a checkpoint's weights may have: the floating ones, checked for NaN and infinities, and the rest
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)
WEIGHT_DTYPES = FLOAT_DTYPES + (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


def is_local(path) -> bool:
    """A file path, not a URL (``https://``, ``s3://``, ...)."""
    return '://' not in str(path)


def is_derived(key: str) -> bool:
    """Whether ``key`` names a buffer of :data:`DERIVED_BUFFERS`."""
    return key.rsplit('.', 1)[-1] in DERIVED_BUFFERS


def non_finite(*state_dicts: dict) -> List[str]:
    """The keys of the tensors of :data:`FLOAT_DTYPES` in ``state_dicts`` holding a NaN or an infinity, read by the
    host once (one stacked flag vector)."""
    tensors = [(k, v) for sd in state_dicts for k, v in sd.items() if torch.is_tensor(v) and v.dtype in FLOAT_DTYPES]
    finite = torch.stack([torch.isfinite(v).all() for _, v in tensors]) if tensors else torch.ones(0, dtype=torch.bool)
    return [] if bool(finite.all()) else [tensors[i][0] for i in (~finite).nonzero().flatten().tolist()]


def _kind(tensor: torch.Tensor) -> str:
    """What makes ``tensor`` no weight a model loads (its layout, quantization or dtype), or ``''``."""
    if tensor.layout != torch.strided:
        return f'a {str(tensor.layout).replace("torch.", "")} tensor'
    if tensor.is_quantized or tensor.dtype not in WEIGHT_DTYPES:
        return f'a {str(tensor.dtype).replace("torch.", "")} tensor'
    return ''


def check_values(checkpoint: dict, filename: str) -> None:
    """Refuse ``checkpoint`` unless its ``state_dict`` and ``ema_state_dict`` hold tensors, each dense, of
    :data:`WEIGHT_DTYPES` (no quantization or float8) and finite (no opt-out): one line naming the file and key."""
    state_dicts = [checkpoint['state_dict'], checkpoint.get('ema_state_dict') or {}]
    tensors = [(k, v) for sd in state_dicts for k, v in sd.items() if isinstance(v, torch.Tensor)]
    if not tensors:
        raise CheckpointError(
            f'checkpoint {filename}: holds no tensors (keys: {sorted(checkpoint)[:SHOWN_KEYS]}); not a model checkpoint'
        )
    odd = [(k, _kind(v)) for k, v in tensors if _kind(v)]
    if odd:
        raise CheckpointError(
            f'checkpoint {filename}: {odd[0][0]} is {odd[0][1]} ({len(odd)} tensors are), not '
            'a weight a model loads (dense, of a float, complex, integer or bool dtype)'
        )
    bad = non_finite(*state_dicts)
    if bad:
        raise CheckpointError(
            f'checkpoint {filename}: {bad[0]} holds NaN or infinite values ({len(bad)} tensors do): '
            'the training had diverged when it was saved; use an earlier checkpoint'
        )


def _shown(keys: List[str]) -> str:
    more = f', ... ({len(keys) - SHOWN_KEYS} more)' if len(keys) > SHOWN_KEYS else ''
    return ', '.join(keys[:SHOWN_KEYS]) + more


@dataclass
class KeyReport:
    """How a state dict fitted a model: ``matched`` (loaded as they are), ``resized`` (loaded after the model's
    load-time hooks gave them its shape, e.g. mmpretrain's position-embedding resize), ``missing`` (model keys the file
    lacks), ``unexpected`` (file keys the model lacks), ``mismatched`` (another shape, after the hooks; not loaded) and
    ``errors`` (other errors of the modules). ``resized``, ``mismatched``: key -> (file shape, model shape). Derived
    buffers (:data:`DERIVED_BUFFERS`) are in no list."""

    matched: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)
    mismatched: Dict[str, Tuple[tuple, tuple]] = field(default_factory=dict)
    resized: Dict[str, Tuple[tuple, tuple]] = field(default_factory=dict)
    errors: List[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Every model key loaded from the file (resized by the model's own hooks or not), nothing left over."""
        return not (self.missing or self.unexpected or self.mismatched or self.errors)

    def summary(self) -> str:
        """``N matched, N resized, N missing, N unexpected, N mismatched keys`` (one line)."""
        return (
            f'{len(self.matched)} matched, {len(self.resized)} resized, {len(self.missing)} missing, '
            f'{len(self.unexpected)} unexpected, {len(self.mismatched)} mismatched keys'
        )

    def describe(self) -> str:
        """The summary and the first keys of each kind that did not load as they are (one line)."""
        resized = [f'{k} {list(c)} in the checkpoint to {list(m)}' for k, (c, m) in self.resized.items()]
        mismatched = [
            f'{k} {list(c)} in the checkpoint vs {list(m)} in the model' for k, (c, m) in self.mismatched.items()
        ]
        parts = [f"resized by the model's load hooks: {_shown(resized)}"] if resized else []
        if self.missing:
            parts.append(f'missing: {_shown(self.missing)}')
        if self.unexpected:
            parts.append(f'unexpected: {_shown(self.unexpected)}')
        if mismatched:
            parts.append(f'size mismatch: {_shown(mismatched)}')
        parts += [f'error: {e}' for e in self.errors[:SHOWN_KEYS]]
        return self.summary() + ('; ' + '; '.join(parts) if parts else '')


def fit(model: nn.Module, state_dict: Dict[str, torch.Tensor]) -> KeyReport:
    """Stage 3 of the pass: copy ``state_dict`` into ``model`` wherever it fits (mmengine's non-strict
    ``load_state_dict``, so the model's load-time hooks run) and report what did and did not. A pre-hook on every
    module, run after the model's own, compares its tensors with the file's (a key of another shape is taken out, so
    torch leaves it without an error); a post-hook on ``model`` hears the missing / unexpected keys and other errors."""
    model = unwrap_model(model)  # mmengine's walk starts inside the wrappers: the hooks go where it starts
    report, found = KeyReport(), {}

    def compare(module, local, prefix, metadata, strict, missing, unexpected, errors):
        found['errors'] = errors  # one list for every module; mmengine appends its own lines after the walk
        own = {
            **module._parameters,
            **{k: v for k, v in module._buffers.items() if k not in module._non_persistent_buffers_set},
        }
        for name, tensor in own.items():
            key = prefix + name
            if tensor is None or not isinstance(local.get(key), torch.Tensor) or is_derived(key):
                continue
            given, stored = tuple(local[key].shape), tuple(state_dict.get(key, local[key]).shape)
            if given != tuple(tensor.shape):
                report.mismatched[key] = (stored, tuple(tensor.shape))
                del local[key]
            elif stored != given:
                report.resized[key] = (stored, given)

    handles = [m.register_load_state_dict_pre_hook(compare) for m in model.modules()]
    handles.append(
        model.register_load_state_dict_post_hook(
            lambda module, keys: found.update(keys=keys, errors=list(found.get('errors', [])))
        )
    )
    try:
        mmengine_load_state_dict(model, state_dict, strict=False, logger='silent')  # the report holds its message
    finally:
        for handle in handles:
            handle.remove()
    keys = found['keys']
    report.missing = [k for k in keys.missing_keys if not is_derived(k) and k not in report.mismatched]
    report.unexpected = [k for k in keys.unexpected_keys if not is_derived(k)]
    report.errors = [e.strip() for e in found.get('errors', [])]
    skipped = set(report.unexpected) | set(report.mismatched) | set(report.resized)
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


def judge(
    model: nn.Module, report: KeyReport, checkpoint: dict, filename: str, policy: str, hint: str, what='the model'
) -> None:
    """Stage 4 of the pass: ``report`` (of ``checkpoint`` in ``model``) by ``policy``. *strict*: every key fits
    (:attr:`KeyReport.clean`). *backbone*: no module reported an error, :data:`MIN_BACKBONE_SHARE` of the backbone's
    tensors (``model.backbone``, else the model) are filled, and no backbone parameter of the file is dropped but
    those its options leave out (``left_out``, e.g. a final norm; the error names what takes them:
    :func:`~mmvitreg.models.converters.where_keys_belong`); the rest of the model may differ. *partial*: anything.

    Raises:
        ValueError: ``policy`` is not one of :data:`POLICIES`.
        CheckpointError: the load breaks the policy (the message names the file, ``what`` was loaded and ``hint``).
    """
    if policy not in POLICIES:
        raise ValueError(f'a load policy is one of {POLICIES}, not {policy!r}')
    if policy == 'strict' and not report.clean:
        raise CheckpointError(
            f'checkpoint {filename} does not fit {what} {type(model).__name__} ({report.describe()}); {hint}'
        )
    if policy != 'backbone':
        return
    backbone = model.backbone if hasattr(model, 'backbone') else model
    prefix = 'backbone.' if backbone is not model else ''
    keys = [k for k in model.state_dict() if not is_derived(k) and k.startswith(prefix)]
    empty = set(report.missing) | set(report.mismatched)
    filled = sum(k not in empty for k in keys)
    looks_like = _looks_like(checkpoint, checkpoint.get('state_dict', checkpoint))
    if report.errors:
        raise CheckpointError(
            f'checkpoint {filename} does not load into the model {type(model).__name__}: {report.errors[0]}; {hint}'
        )
    if not keys or filled < MIN_BACKBONE_SHARE * len(keys):
        raise CheckpointError(
            f'checkpoint {filename} does not fit the model {type(model).__name__}: it would fill {filled} of the '
            f'{len(keys)} backbone tensors (at least {MIN_BACKBONE_SHARE:.0%} needed; {report.summary()}); the file '
            f'looks like {looks_like}. Use a checkpoint of this architecture or a config built for this one; {hint}'
        )
    left_out = tuple(f'{prefix}{name}.' for name in getattr(backbone, 'left_out', ()))
    dropped = [k for k in report.unexpected if k.startswith(prefix) and not k.startswith(left_out)]
    if dropped:
        takers = where_keys_belong(dropped)
        belong = '; '.join(takers) or f'another model (the file looks like {looks_like})'
        raise CheckpointError(
            f'checkpoint {filename} has {len(dropped)} parameters the model {type(model).__name__} has no '
            f'place for ({_shown(dropped)}): without them it would not compute what was trained. They '
            f'belong to {belong}: use that config; {hint}'
        )


def compare_copy(copy: nn.Module, checkpoint: dict) -> KeyReport:
    """What ``copy`` (an ``EMAHook``'s ``ema_model.module``, filled by the hook's own rule) holds of the file, loading
    nothing: each tensor equal to the same key's in ``checkpoint['state_dict']`` or its ``ema_state_dict``
    (``module.`` dropped) is *matched*, one of another shape in every source *mismatched*, any other *missing*."""
    ema = checkpoint.get('ema_state_dict')
    ema = ema if isinstance(ema, dict) else {}  # an AveragedModel's: the model's under module., and a step count
    sources = [checkpoint['state_dict'], {k[len('module.') :]: v for k, v in ema.items() if k.startswith('module.')}]
    report = KeyReport()
    for key, tensor in copy.state_dict().items():
        if is_derived(key):
            continue
        given = [source[key] for source in sources if isinstance(source.get(key), torch.Tensor)]
        if any(g.shape == tensor.shape and torch.equal(g.to(tensor.device), tensor) for g in given):
            report.matched.append(key)
        elif given and all(g.shape != tensor.shape for g in given):
            report.mismatched[key] = (tuple(given[0].shape), tuple(tensor.shape))
        else:
            report.missing.append(key)
    return report


def load_converted(
    model: nn.Module,
    checkpoint: dict,
    filename: str,
    policy: str,
    hint: str,
    purpose: str,
    after_read: Optional[Callable[[dict], None]] = None,
    ema_copies: Sequence = (),
    logger='current',
) -> KeyReport:
    """Stages 3-4 of the pass on a converted ``checkpoint``: :func:`check_values`, ``after_read(checkpoint)`` (a
    runner's ``after_load_checkpoint`` hooks), :func:`fit` into ``model``, :func:`judge` by ``policy`` and one log line
    ``{purpose} {filename}: {report.describe()}`` (INFO if clean, else WARNING); then each ``(EMA copy, hook name)``
    of ``ema_copies`` compared (:func:`compare_copy`), judged, and refused if it holds none of the file's tensors.
    Raises a :class:`CheckpointError` if a value is wrong or the load breaks the policy."""
    check_values(checkpoint, filename)
    if after_read is not None:
        after_read(checkpoint)
    report = fit(model, checkpoint['state_dict'])
    judge(model, report, checkpoint, filename, policy, hint)
    print_log(
        f'{purpose} {filename}: {report.describe()}',
        logger=logger,
        level=logging.INFO if report.clean else logging.WARNING,
    )
    for copy, hook in ema_copies:
        copied = compare_copy(copy, checkpoint)
        judge(copy, copied, checkpoint, filename, policy, hint, f"{hook}'s EMA copy of")
        if not copied.matched:  # whatever the policy: an EMA copy at its initialisation is never tested
            raise CheckpointError(
                f'checkpoint {filename}: {hook} loaded none of its tensors into its EMA copy '
                f'({copied.summary()}), which would be evaluated with random weights; use a '
                'checkpoint of this config, or drop the hook (custom_hooks=[])'
            )
    return report


def load_weights(
    model: nn.Module,
    filename: str,
    policy: str = 'strict',
    prefix: Optional[str] = None,
    map_location='cpu',
    hint: str = 'use a checkpoint of this model',
    logger='current',
    purpose: str = 'weights',
) -> KeyReport:
    """The pass for a tool or an init: read and convert ``filename``, keep the keys under ``prefix`` (without it) and
    load them into ``model`` by ``policy`` (:func:`load_converted`); a :class:`CheckpointError` if any stage fails."""
    checkpoint = convert_checkpoint(read_checkpoint(filename, map_location), filename, logger=logger)
    state_dict = checkpoint['state_dict']
    if prefix:
        prefix = prefix if prefix.endswith('.') else prefix + '.'
        selected = OrderedDict((k[len(prefix) :], v) for k, v in state_dict.items() if k.startswith(prefix))
        if not selected:
            raise CheckpointError(
                f"checkpoint {filename} has no key under the prefix='{prefix}'; the file "
                f'looks like {_looks_like(checkpoint, state_dict)}; {hint}'
            )
        purpose, checkpoint = f"{purpose} (prefix='{prefix}')", {**checkpoint, 'state_dict': selected}
    return load_converted(model, checkpoint, filename, policy, hint, purpose, logger=logger)


_INIT_HINT = (
    "check init_cfg's checkpoint and prefix (prefix='backbone.' loads a classifier checkpoint's backbone "
    'into a backbone); load_from with --allow-partial loads whatever fits'
)


@WEIGHT_INITIALIZERS.register_module(name='Pretrained')
class Pretrained(PretrainedInit):
    """``init_cfg=dict(type='Pretrained', _scope_='mmvitreg', checkpoint=..., prefix=...)``: mmengine's
    ``PretrainedInit`` through the one pass (:func:`load_weights`, the *backbone* policy). mmvitreg's backbones get it
    for ``type='Pretrained'`` too (:func:`~mmvitreg.models.backbones.init_cfg.own_pretrained`); other models only
    with ``_scope_`` (mmengine and mmpretrain keep loaded weights only for ``type='Pretrained'``)."""

    def __call__(self, module: nn.Module) -> None:
        load_weights(
            module, self.checkpoint, 'backbone', self.prefix, self.map_location, _INIT_HINT, purpose='init_cfg'
        )
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())


#: whether :func:`partial_loading` is active (inference from a checkpoint that does not fill the model)
_PARTIAL = ContextVar('mmvitreg_partial_loading', default=False)
_INFERENCE_HINT = (
    "mmengine's loaders fill an mmvitreg model only from a file that fills every parameter: use a "
    'checkpoint of this config, or load the keys that fit inside '
    "`with mmvitreg.engine.partial_loading():` (a training: mmvitreg's tools/train.py, whose load_from "
    'takes what fits the backbone)'
)


def fill_model(model: nn.Module, checkpoint: dict, rules: Sequence = REVISE_KEYS) -> dict:
    """mmengine's ``_load_checkpoint_to_model`` for models holding an mmvitreg module (through ``mmvitreg.compat``):
    a read ``checkpoint`` converted and loaded by :func:`load_converted`, *strict* whatever mmengine's ``strict``
    says, *partial* inside :func:`partial_loading`."""
    name = 'given to load_checkpoint'
    checkpoint = convert_checkpoint(checkpoint, name, rules)
    load_converted(model, checkpoint, name, 'partial' if _PARTIAL.get() else 'strict', _INFERENCE_HINT, 'checkpoint')
    return checkpoint


@contextmanager
def partial_loading() -> Iterator[None]:
    """Inside it, :func:`fill_model` loads by the *partial* policy, with one warning::

    with mmvitreg.engine.partial_loading():
        inferencer = ImageClassificationInferencer(config, pretrained=checkpoint_of_another_head)
    """
    token = _PARTIAL.set(True)
    try:
        yield
    finally:
        _PARTIAL.reset(token)


class AtomicLocalBackend(LocalBackend):
    """mmengine's :class:`LocalBackend` writing through :func:`mmvitreg.fileio.atomic_write`: a killed write leaves at
    most a hidden temporary (:func:`~mmvitreg.fileio.remove_stale_temporaries`), never a truncated file. A file it is
    asked to remove (``max_keep_ckpts``, the old best) goes when the next write into its folder completes, so a failed
    or refused save never costs the previous checkpoint."""

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
