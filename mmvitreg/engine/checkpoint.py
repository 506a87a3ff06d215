"""Checkpoints that are never silently wrong: one loading pass, key reports, atomic writing.

mmengine 0.10.7 reads a checkpoint with a bare ``torch.load`` (a truncated file ends in an
``UnpicklingError`` naming no file), loads state dicts non-strictly with one warning line per key
(``tools/test.py`` given another model's checkpoint evaluates a half-random model and exits 0), and
writes checkpoints in place (a process killed while saving leaves a truncated file under the final
name). Every checkpoint mmvitreg's tools and models read goes through one pass instead, each step in one place:

1. **read** - :func:`read_checkpoint`: a local file, or a remote one (``https://``, ``s3://``, any prefix
   with an mmengine file backend) fetched through ``mmengine.fileio.get_local_path``, unpickled by
   :func:`mmvitreg.fileio.load_checkpoint` (``weights_only=True`` and its allow-list); one
   :class:`CheckpointError` line naming the file and what is wrong;
2. **revise, detect and convert** - :func:`mmvitreg.models.converters.convert_official`: the keys revised once
   (:func:`~mmvitreg.models.converters.revise_keys`, mmengine's ``revise_keys``: DDP's ``module.`` dropped), an
   official release converted (one log line): :func:`load_checkpoint_file` returns mmengine's
   ``{'state_dict': ...}`` form;
3. **fit** - :func:`fit`: :func:`load_state_dict_checked` (mmengine's ``load_state_dict`` walk, so load-time hooks
   such as mmpretrain's position-embedding resize run, listened to for a :class:`KeyReport`), and the policy
   decides (:func:`judge`): *strict* (every key fits), *backbone* (:func:`check_fit`: most of the backbone filled,
   no backbone parameter of the file dropped but those the backbone's options leave out) or *partial* (whatever
   fits). An ``EMAHook``'s copy is filled by the hook and only checked (:func:`check_copy`).

Who calls it: :class:`~mmvitreg.engine.runner.GuardedRunner` (``load_from``, ``--resume``, ``tools/test.py``),
:class:`Pretrained` (``init_cfg``: the *backbone* policy, a training's start, for mmvitreg's backbones, whose
``init_weights`` scope their ``type='Pretrained'`` to mmvitreg; and, through ``mmvitreg.compat``'s
``mmvitreg_model_loading`` patch of ``_load_checkpoint_to_model``, mmpretrain's ``get_model`` / inferencers and
mmengine's ``load_checkpoint`` for models containing an mmvitreg module: *strict*, :func:`partial_loading` the
opt-out), :func:`load_weights` (the analysis tools, ``tools/deployment/pytorch2onnx.py``: *strict*,
``--allow-partial`` the opt-out) and :func:`converter_cli` (``tools/model_converters/``).

Also here: :class:`AtomicLocalBackend` (mmengine's local file backend writing through
:func:`mmvitreg.fileio.atomic_write`) and :func:`resume_candidates` (what ``--resume auto`` may take).
"""
import argparse
import logging
import os
import os.path as osp
import re
import sys
from collections import OrderedDict
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from mmengine.fileio import LocalBackend, get_local_path, register_backend
from mmengine.logging import print_log
from mmengine.model.weight_init import PretrainedInit, update_init_info
from mmengine.runner.checkpoint import load_state_dict as mmengine_load_state_dict
from torch import nn

import mmvitreg.models.backbones  # noqa: F401  (registers the DeepViT, LV-ViT and Swin release layouts)
from mmvitreg.fileio import (UNSAFE_LOAD_HELP, UnsafeCheckpointError, atomic_write, load_checkpoint,
                             remove_stale_temporaries)
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
    """Read a checkpoint, local or remote, or raise one :class:`CheckpointError` line that names it.

    A remote file (``https://``, ``s3://``, any prefix that has an mmengine file backend) is fetched by
    ``mmengine.fileio.get_local_path`` and read as a local one. The file is unpickled by
    :func:`mmvitreg.fileio.load_checkpoint` (``weights_only=True`` and the allow-list of what checkpoints
    hold, unless ``unsafe`` or the user's ``--unsafe-load``).

    Returns:
        dict: the checkpoint (``{'state_dict': ..., 'meta': ..., ...}`` or a bare state dict).

    Raises:
        CheckpointError: the file cannot be fetched, does not exist, is empty, is truncated or not a
            PyTorch file, holds something other than a checkpoint dict, or names a global outside the allow-list.
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
    """Step 2 of the pass: ``checkpoint`` in mmengine's form, its keys revised by ``rules`` (default: DDP's
    ``module.`` dropped; :func:`~mmvitreg.models.converters.revise_keys`, the one place keys are revised), an
    official release converted (one log line naming its layout and converter).

    Raises:
        CheckpointError: the checkpoint holds no state dict, looks like an official release that its converter
            cannot convert (the message names the keys), or holds weights that are not finite (:func:`non_finite`,
            of ``state_dict`` and ``ema_state_dict``: the message names the first; no opt-out).
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
    """Read ``filename`` (:func:`read_checkpoint`) and return it in mmengine's form (:func:`normalise_checkpoint`:
    keys revised by ``rules``, an official release converted).

    It is deliberately not mmengine's ``CheckpointLoader.load_checkpoint``: mmseg's and mmdet's own Swin read
    official Swin files through that with ``convert_weights=True`` and convert them themselves.

    Raises:
        CheckpointError: the file cannot be read or converted.
    """
    return normalise_checkpoint(read_checkpoint(filename, map_location), filename, logger, rules)


def _shown(keys: List[str]) -> str:
    more = f', ... ({len(keys) - SHOWN_KEYS} more)' if len(keys) > SHOWN_KEYS else ''
    return ', '.join(keys[:SHOWN_KEYS]) + more


@dataclass
class KeyReport:
    """How a state dict fitted a model; derived buffers (:data:`DERIVED_BUFFERS`) are in no list.

    Attributes:
        matched (List[str]): checkpoint keys loaded into the model.
        missing (List[str]): model keys the checkpoint lacks.
        unexpected (List[str]): checkpoint keys the model does not have.
        resized (Dict[str, Tuple[tuple, tuple]]): key -> (checkpoint shape, model shape) for keys
            whose shapes still differ after the modules' load-time hooks; they are not loaded.
        errors (List[str]): any other error a module reported while loading.
    """

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
    """Copy ``state_dict`` into ``model`` wherever it fits (mmengine's
    :func:`~mmengine.runner.checkpoint.load_state_dict`, non-strict) and report what did not.

    mmengine walks the modules (each module's ``_load_from_state_dict`` with its pre-hooks, e.g. mmpretrain's
    position-embedding resize, then the post-hooks) and skips size-mismatched tensors; this wrapper only listens:
    a post-hook on ``model`` (called last, with mmengine's missing / unexpected lists) and the message mmengine
    logs (its size mismatches; mmengine logs them on rank 0 only, so another rank's report lists none and the
    rank-0 error stops the run). Derived buffers (:data:`DERIVED_BUFFERS`) are not counted.
    """
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
    """The *backbone* policy: raise unless the load filled at least :data:`MIN_BACKBONE_SHARE` of the backbone's
    tensors and found a place in the backbone for every backbone parameter of the checkpoint.

    The backbone is ``model.backbone`` when the model has one, else the model (a backbone loaded through
    ``init_cfg``); its tensors that the report lists as missing or resized count as not filled. The rest of the
    model may differ (a classifier's head in a segmentor, other classes), and so may the modules the backbone's own
    options leave out (its ``left_out``: a final norm with ``final_norm=False``), but any other parameter the
    backbone has no place for (a talking-heads file in a model without them) would be dropped, and the model
    would not compute what was trained: the error names the keys and what takes them
    (:func:`~mmvitreg.models.converters.where_keys_belong`).

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


def fit(model: nn.Module, state_dict: Dict[str, torch.Tensor], filename: str, checkpoint: dict, policy: str,
        hint: str, what: str = 'the model') -> KeyReport:
    """Step 3 of the pass: load ``state_dict`` into ``model`` (:func:`load_state_dict_checked`) and apply ``policy``:
    *strict* raises on any key that does not fit, *backbone* is :func:`check_fit`, *partial* takes what fits.

    Raises:
        CheckpointError: the load breaks the policy (the message names the file, ``what`` was loaded and ``hint``).
    """
    if policy not in POLICIES:
        raise ValueError(f'a load policy is one of {POLICIES}, not {policy!r}')
    return judge(model, load_state_dict_checked(model, state_dict), filename, checkpoint, policy, hint, what)


def judge(model: nn.Module, report: KeyReport, filename: str, checkpoint: dict, policy: str, hint: str,
          what: str = 'the model') -> KeyReport:
    """Apply ``policy`` to ``report`` (how a load into ``model`` went): *strict* raises on any key that does not fit,
    *backbone* is :func:`check_fit`, *partial* takes what fits. Returns ``report``.

    Raises:
        CheckpointError: the load breaks the policy (the message names the file, ``what`` was loaded and ``hint``).
    """
    if policy == 'strict' and not report.clean:
        raise CheckpointError(f'checkpoint {filename} does not fit {what} {type(model).__name__} '
                              f'({report.describe()}); {hint}')
    if policy == 'backbone':
        check_fit(model, report, filename, checkpoint, hint)
    return report


def check_copy(copy: nn.Module, checkpoint: dict, filename: str, policy: str, hint: str,
               what: str = "EMAHook's EMA copy of") -> KeyReport:
    """Check, without loading anything, that ``copy`` (an ``EMAHook``'s ``ema_model.module``, after the hook's
    ``after_load_checkpoint`` loaded it by its own rule) holds the file's weights: each of its tensors must equal the
    same key's tensor in ``checkpoint['state_dict']`` or ``checkpoint['ema_state_dict']`` (``module.`` dropped), as
    they stand after the hooks. Which of the two the hook took is the hook's business (mmengine's and mmpretrain's
    hooks differ): a tensor found in neither is *missing*, one whose key is there with another shape *resized*,
    and ``policy`` judges the report as :func:`fit` does.

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
    return judge(copy, report, filename, checkpoint, policy, hint, what)


def load_weights(model: nn.Module, filename: str, policy: str = 'strict', prefix: Optional[str] = None,
                 map_location='cpu', hint: str = 'use a checkpoint of this model', logger='current') -> KeyReport:
    """The whole pass for a tool or an init: read and convert ``filename`` (:func:`load_checkpoint_file`), keep
    the keys under ``prefix`` (without it), :func:`fit` them into ``model`` by ``policy`` and log one line.

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
        state_dict = selected
    report = fit(model, state_dict, filename, {**checkpoint, 'state_dict': state_dict}, policy, hint)
    print_log(f'{filename}' + (f' ({prefix})' if prefix else '') + f': {report.describe()}', logger=logger,
              level=logging.INFO if report.clean else logging.WARNING)
    return report


_INIT_HINT = ("check init_cfg's checkpoint and prefix (prefix='backbone.' loads a classifier checkpoint's backbone "
              'into a backbone); load_from with --allow-partial loads whatever fits')


@WEIGHT_INITIALIZERS.register_module(name='Pretrained')
class Pretrained(PretrainedInit):
    """``init_cfg=dict(type='Pretrained', _scope_='mmvitreg', checkpoint=..., prefix=...)``: mmengine's
    ``PretrainedInit`` through the one pass, with the *backbone* policy (:func:`load_weights`): an official release
    is converted before the prefix is selected, and a checkpoint that would leave the backbone random, or drop
    parameters of its own, stops the run. mmengine's own loads whatever fits with one warning per key.

    mmvitreg's backbones get it for ``init_cfg=dict(type='Pretrained')`` too (their ``init_weights`` adds the
    ``_scope_``: :func:`~mmvitreg.models.backbones.init_cfg.own_pretrained`); any other model only when its config
    asks for it with ``_scope_``
    (``type='mmvitreg.Pretrained'`` names the same class, but mmengine's and mmpretrain's ``init_weights`` keep
    loaded weights only for ``type='Pretrained'``, and re-initialise e.g. the position embedding otherwise).
    """

    def __call__(self, module: nn.Module) -> None:
        load_weights(module, self.checkpoint, 'backbone', self.prefix, self.map_location, _INIT_HINT)
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())

    @staticmethod
    def load_checkpoint_dict(model: nn.Module, checkpoint: dict, strict: bool = False,
                             revise_keys: Sequence = REVISE_KEYS) -> dict:
        """mmengine's ``_load_checkpoint_to_model`` for mmvitreg's models (mmpretrain's ``get_model`` and inferencers,
        mmengine's ``load_checkpoint`` and ``BaseInferencer``: inference, never a training's start): steps 2-3 of
        the pass on an already read ``checkpoint``, *strict* whatever ``strict`` says (mmengine passes False by
        default), *partial* inside :func:`partial_loading`.

        Raises:
            CheckpointError: the checkpoint does not convert, or does not fill every parameter of the model (one
                line naming what is missing and the opt-out).
        """
        name = 'given to load_checkpoint'
        checkpoint = normalise_checkpoint(checkpoint, name, rules=revise_keys)
        report = fit(model, checkpoint['state_dict'], name, checkpoint, 'partial' if _PARTIAL.get() else 'strict',
                     _INFERENCE_HINT)
        print_log(f'checkpoint {name}: {report.describe()}', logger='current',
                  level=logging.INFO if report.clean else logging.WARNING)
        return checkpoint


#: whether :func:`partial_loading` is active (inference from a checkpoint that does not fill the model)
_PARTIAL = ContextVar('mmvitreg_partial_loading', default=False)
_INFERENCE_HINT = ('a model predicts only from a checkpoint that fills every parameter: use a checkpoint of this '
                   'config, or to predict from the keys that fit anyway call it inside '
                   '`with mmvitreg.engine.partial_loading():`')


@contextmanager
def partial_loading() -> Iterator[None]:
    """The opt-out of strict inference loading: inside it, mmpretrain's ``get_model`` / inferencers and mmengine's
    ``load_checkpoint`` load an mmvitreg model from whatever keys of the checkpoint fit (one warning with the
    counts) instead of stopping at the first missing, unexpected or size-mismatched key::

        with mmvitreg.engine.partial_loading():
            inferencer = ImageClassificationInferencer(config, pretrained=checkpoint_of_another_head)
    """
    token = _PARTIAL.set(True)
    try:
        yield
    finally:
        _PARTIAL.reset(token)


def convert_checkpoint_file(src: str, dst: str, convert: Callable[[Dict[str, torch.Tensor]], Dict[str, torch.Tensor]],
                            ema: bool = False, unsafe_load: bool = False) -> Dict[str, torch.Tensor]:
    """Read an official checkpoint (:func:`read_checkpoint`: local or remote, the allow-list unless
    ``unsafe_load``), convert its state dict with ``convert`` and save ``{'state_dict': converted}`` to ``dst``
    (loadable by ``load_from`` and by ``init_cfg=dict(type='Pretrained', checkpoint=dst)``, with
    ``prefix='backbone.'`` for a backbone alone).

    Raises:
        CheckpointError: ``src`` cannot be read, or holds keys ``convert`` does not know (they are listed).
    """
    checkpoint = read_checkpoint(src, 'cpu', unsafe=unsafe_load or None)
    try:
        converted = convert(revise_keys(unwrap_checkpoint(checkpoint, ema=ema)))
    except (KeyError, ValueError) as e:
        raise CheckpointError(f'checkpoint {src} does not convert: {e.args[0]}') from None
    torch.save({'state_dict': converted}, dst)
    return converted


def converter_cli(convert: Callable[[Dict[str, torch.Tensor]], Dict[str, torch.Tensor]], description: str,
                  argv: Optional[Sequence[str]] = None, configure: Callable = None) -> None:
    """Command line ``SRC DST [--ema] [--unsafe-load]`` of the tools in ``tools/model_converters/``; a refusal
    is one ``error:`` line. ``configure(parser)`` adds a tool's own options and returns, from the parsed
    arguments, the converter to use (default: ``convert``)."""
    parser = argparse.ArgumentParser(description=description.strip().splitlines()[0])
    parser.add_argument('src', help='official checkpoint (.pth / .pth.tar; a local path or a URL)')
    parser.add_argument('dst', help='output checkpoint')
    parser.add_argument('--ema', action='store_true',
                        help='convert the EMA weights (state_dict_ema / model_ema) if present')
    parser.add_argument('--unsafe-load', action='store_true', help=UNSAFE_LOAD_HELP)
    pick = configure(parser) if configure else None
    args = parser.parse_args(argv)
    try:
        converted = convert_checkpoint_file(args.src, args.dst, pick(args) if pick else convert, ema=args.ema,
                                            unsafe_load=args.unsafe_load)
    except CheckpointError as e:
        sys.exit(f'error: {e}')
    print(f'saved {len(converted)} tensors to {args.dst}')


class AtomicLocalBackend(LocalBackend):
    """mmengine's :class:`LocalBackend` whose writes are atomic (:func:`mmvitreg.fileio.atomic_write`): a reader sees
    the old file or the complete new one, a process killed while writing leaves at most a hidden ``.<name>.*.tmp``
    file, never a truncated file under the final name, and the next write removes such leftovers. A file it is
    asked to remove (mmengine's ``max_keep_ckpts`` and best checkpoint, each removed just before the save that
    replaces it) goes when the next write into its folder completes, so a save that fails or is refused (weights
    that are not finite) never costs the previous checkpoint."""

    #: folder -> the files whose removal waits for the next completed write there (the checkpoint hook removes
    #: through its own instance, the runner writes through another)
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

_STEP = re.compile(r'^(?:epoch|iter)_(\d+)\.pth$')


def resume_candidates(work_dir: str) -> List[str]:
    """Checkpoints ``--resume auto`` may resume from, newest first: the one ``last_checkpoint``
    names, then ``epoch_N.pth`` / ``iter_N.pth`` of ``work_dir`` by decreasing ``N``."""
    candidates = []
    pointer = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer) as f:
            named = f.read().strip()
        if named:
            candidates.append(named)
    if osp.isdir(work_dir):
        steps = [(int(m.group(1)), name) for name in os.listdir(work_dir) if (m := _STEP.match(name))]
        for _, name in sorted(steps, reverse=True):
            path = osp.join(work_dir, name)
            if not any(osp.abspath(path) == osp.abspath(c) for c in candidates):
                candidates.append(path)
    return candidates


def first_readable(candidates: List[str], warn) -> Optional[Tuple[str, dict]]:
    """The first candidate that reads as a checkpoint, and the checkpoint; ``warn(message)`` for
    each one skipped. None when there is no candidate.

    Raises:
        CheckpointError: there were candidates, but none could be read.
    """
    problems = []
    for path in candidates:
        try:
            return path, read_checkpoint(path)
        except CheckpointError as e:
            problems.append(str(e))
            warn(f'--resume auto: skipping {path}, which cannot be read ({e}); trying the previous checkpoint')
    if problems:
        raise CheckpointError('--resume auto: no readable checkpoint to resume from: ' + ' | '.join(problems))
    return None
