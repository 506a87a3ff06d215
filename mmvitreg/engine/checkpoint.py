"""Checkpoints that are never silently wrong: checked reading, key reports, atomic writing.

mmengine 0.10.7 reads a checkpoint with a bare ``torch.load`` (a truncated file ends in an
``UnpicklingError`` naming no file), loads state dicts non-strictly with one warning line per key
(``tools/test.py`` given another model's checkpoint evaluates a half-random model and exits 0), and
writes checkpoints in place (a process killed while saving leaves a truncated file under the final
name). This module holds the pieces :class:`~mmvitreg.engine.runner.GuardedRunner` uses instead:

* :func:`read_checkpoint` - one :class:`CheckpointError` line naming the file and what is wrong
  (missing, empty, truncated / not a torch file, not a checkpoint, a pickle global outside the allow-list
  of :func:`mmvitreg.compat.load_checkpoint`, which reads it);
* :func:`load_checkpoint_file` - a checkpoint read, local or remote, in mmengine's ``{'state_dict': ...}``
  form, an official release converted on the way (one log line): what ``load_from``, ``tools/test.py``
  and ``init_cfg=dict(type='Pretrained')`` read;
* :func:`check_fit` - the error for a load that would leave most of the backbone random;
* :func:`load_pretrained` - ``init_cfg=dict(type='Pretrained')`` through the two above;
* :func:`load_state_dict_checked` - loads through every module's own ``_load_from_state_dict``
  (so load-time pre-hooks such as mmpretrain's position-embedding resize still run) and returns a
  :class:`KeyReport` of matched, missing, unexpected and size-mismatched keys;
* :class:`AtomicLocalBackend` - mmengine's local file backend writing to a temporary file in the
  same folder and moving it over the final name with ``os.replace`` (atomic on POSIX and Windows);
* :func:`resume_candidates` - the checkpoints ``--resume auto`` may take, newest first.
"""
import logging
import os
import os.path as osp
import re
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
from mmengine.fileio import LocalBackend, register_backend
from mmengine.logging import print_log
from mmengine.runner.checkpoint import CheckpointLoader
from torch import nn

from mmvitreg.compat import UnsafeCheckpointError, load_checkpoint
from mmvitreg.models.converters import convert_official, detect_layout, unwrap_checkpoint

#: name of the atomic local backend in mmengine's file-backend registry
ATOMIC_BACKEND = 'mmvitreg_atomic_local'
#: how many keys of each kind an error message lists
SHOWN_KEYS = 5
#: the least share of the backbone's tensors a ``load_from`` / ``init_cfg`` load must fill (else an error)
MIN_BACKBONE_SHARE = 0.9


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and what is wrong."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f'{type(e).__name__}: {text[0].split(". ")[0]}' if text else type(e).__name__  # its first sentence


def read_checkpoint(filename: str, map_location='cpu') -> dict:
    """Read a local checkpoint file, or raise one :class:`CheckpointError` line that names it.

    Returns:
        dict: the checkpoint (``{'state_dict': ..., 'meta': ..., ...}`` or a bare state dict).

    The file is unpickled by :func:`mmvitreg.compat.load_checkpoint` (``weights_only=True`` and the
    allow-list of what checkpoints hold, unless the user opted into ``--unsafe-load``).

    Raises:
        CheckpointError: the file does not exist, is empty, is truncated or not a PyTorch file,
            holds something other than a checkpoint dict, or names a global outside the allow-list.
    """
    if not osp.isfile(filename):
        raise CheckpointError(f'checkpoint {filename}: no such file')
    size = osp.getsize(filename)
    if size == 0:
        raise CheckpointError(f'checkpoint {filename}: empty file (0 bytes), e.g. a save that was interrupted')
    try:
        checkpoint = load_checkpoint(filename, map_location)
    except UnsafeCheckpointError as e:  # its message names the file, the global and the opt-in
        raise CheckpointError(str(e)) from None
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for damaged files
        raise CheckpointError(f'checkpoint {filename}: not a readable PyTorch checkpoint ({size} bytes; truncated '
                              f'or another format): {_first_line(e)}') from None
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f'checkpoint {filename}: holds a {type(checkpoint).__name__}, not a checkpoint '
                              '(a dict with a state_dict, or a state dict)')
    try:
        state_dict = unwrap_checkpoint(checkpoint)
    except KeyError:
        state_dict = {}
    if not any(isinstance(v, torch.Tensor) for v in state_dict.values()):
        raise CheckpointError(f'checkpoint {filename}: holds no tensors (keys: {sorted(checkpoint)[:SHOWN_KEYS]}); '
                              'not a model checkpoint')
    return checkpoint


def is_local(path) -> bool:
    """A file path, not a URL (``https://``, ``open-mmlab://``, ...)."""
    return '://' not in str(path)


def load_checkpoint_file(filename: str, map_location=None, logger='current') -> dict:
    """Read a checkpoint and return it in mmengine's form, an official release converted.

    Local files are read by :func:`read_checkpoint`, anything else by mmengine's ``CheckpointLoader``
    (``https://``, ``open-mmlab://``, ...). Then
    :func:`~mmvitreg.models.converters.convert_official`: an official release (LV-ViT, DeepViT,
    DiversePatch, timm DeiT / TL-Align, Swin; raw or wrapped) is converted by its converter and one
    log line names the layout and the conversion; a ``{'model': ...}`` wrapper or a bare state dict
    goes under ``state_dict``; an mmengine checkpoint is returned as it is.

    Its two callers are where a user puts a checkpoint: :class:`~mmvitreg.engine.runner.GuardedRunner`
    (``load_from``, ``tools/test.py``) and :func:`load_pretrained` (``init_cfg``). It is deliberately not
    mmengine's ``CheckpointLoader.load_checkpoint``: mmseg's and mmdet's own Swin read official Swin files
    through that with ``convert_weights=True`` and convert them themselves.

    Raises:
        CheckpointError: the file cannot be read, or looks like an official release that its converter
            cannot convert (the message names the keys).
    """
    if is_local(filename):
        checkpoint = read_checkpoint(filename, map_location)
    else:
        checkpoint = CheckpointLoader.load_checkpoint(filename, map_location=map_location, logger=logger)
    try:
        converted, layout = convert_official(checkpoint)
    except KeyError as e:  # a remote file that is not a checkpoint (local ones are checked when read)
        raise CheckpointError(f'checkpoint {filename}: {e.args[0]}') from None
    except ValueError as e:
        layout = detect_layout(unwrap_checkpoint(checkpoint))
        raise CheckpointError(f'checkpoint {filename} looks like the {layout.name} release layout but does not '
                              f'convert: {e}') from None
    if layout is not None:
        converted['meta'] = dict(official_layout=layout.name, official_model=layout.model)
        print_log(f'checkpoint {filename}: {layout.name} release layout, converted on load by '
                  f'{layout.convert.__module__}.{layout.convert.__name__} (as `python {layout.tool} SRC DST` '
                  'does offline)', logger=logger)
    return converted


def _shown(keys: List[str]) -> str:
    more = f', ... ({len(keys) - SHOWN_KEYS} more)' if len(keys) > SHOWN_KEYS else ''
    return ', '.join(keys[:SHOWN_KEYS]) + more


@dataclass
class KeyReport:
    """How a state dict fitted a model.

    Attributes:
        matched (List[str]): checkpoint keys loaded into the model.
        missing (List[str]): model keys the checkpoint lacks (``num_batches_tracked`` ignored, as
            mmengine does).
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


def _shape(text: str) -> tuple:
    return tuple(int(d) for d in re.findall(r'\d+', text))


def load_state_dict_checked(model: nn.Module, state_dict: Dict[str, torch.Tensor]) -> KeyReport:
    """Copy ``state_dict`` into ``model`` wherever it fits and report what did not.

    Walks the modules as ``nn.Module.load_state_dict`` does (each module's ``_load_from_state_dict``
    with its pre-hooks, e.g. mmpretrain's position-embedding resize, then the post-hooks), but never
    raises: size-mismatched tensors are skipped and reported, so the caller decides whether a
    partial load is acceptable.
    """
    metadata = getattr(state_dict, '_metadata', None)
    state_dict = dict(state_dict)
    missing, unexpected, errors = [], [], []

    def load(module: nn.Module, prefix: str = ''):
        local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
        module._load_from_state_dict(state_dict, prefix, local_metadata, True, missing, unexpected, errors)
        for name, child in module._modules.items():
            if child is not None:
                load(child, prefix + name + '.')
        incompatible = nn.modules.module._IncompatibleKeys(missing, unexpected)
        for hook in module._load_state_dict_post_hooks.values():
            hook(module, incompatible)

    load(model)
    report = KeyReport(missing=[k for k in missing if 'num_batches_tracked' not in k], unexpected=unexpected)
    for msg in errors:
        m = _SIZE_MISMATCH.search(msg)
        if m:
            report.resized[m.group(1)] = (_shape(m.group(2)), _shape(m.group(3)))
        else:
            report.errors.append(msg.strip().splitlines()[0])
    skipped = set(report.unexpected) | set(report.resized)
    report.matched = [k for k in state_dict if k not in skipped]
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
    """Raise unless the load filled at least :data:`MIN_BACKBONE_SHARE` of the backbone's tensors.

    The backbone is ``model.backbone``'s keys when the model has one, else all of the model's keys
    (a backbone loaded through ``init_cfg``); its tensors that the report lists as missing or resized
    count as not filled. The head may differ (fine-tuning on other classes).

    Raises:
        CheckpointError: naming the file, how much would load, the layout the file looks like and ``hint``.
    """
    keys = [k for k in model.state_dict() if 'num_batches_tracked' not in k]
    if hasattr(model, 'backbone'):
        keys = [k for k in keys if k.startswith('backbone.')]
    empty = set(report.missing) | set(report.resized)
    filled = sum(k not in empty for k in keys)
    if keys and filled >= MIN_BACKBONE_SHARE * len(keys):
        return
    state_dict = checkpoint.get('state_dict', checkpoint)
    raise CheckpointError(
        f'checkpoint {filename} does not fit the model {type(model).__name__}: it would fill {filled} of the '
        f'{len(keys)} backbone tensors (at least {MIN_BACKBONE_SHARE:.0%} needed; {report.summary()}); the file looks '
        f'like {_looks_like(checkpoint, state_dict)}. Use a checkpoint of this architecture or a config built for '
        f'this one; {hint}')


def load_pretrained(module: nn.Module, filename: str, prefix: Optional[str] = None, map_location=None) -> KeyReport:
    """``init_cfg=dict(type='Pretrained', checkpoint=filename, prefix=prefix)``: read ``filename``
    (:func:`load_checkpoint_file`, an official release converted), keep the keys under ``prefix`` (without
    it), load what fits into ``module`` and check that it fills its backbone (:func:`check_fit`).

    ``import mmvitreg`` makes mmengine's ``PretrainedInit`` call it: every ``init_cfg=dict(type='Pretrained')``
    goes through that one class with the module and the prefix, so the hook can both convert (before the
    prefix is selected) and check the fit. mmengine's own loads whatever fits with one warning per key,
    so a checkpoint of another model, or a missing ``prefix``, left the model random and training went on
    from scratch.

    Raises:
        CheckpointError: the file cannot be read, holds no key under ``prefix``, or fills too little.
    """
    checkpoint = load_checkpoint_file(filename, map_location)
    state_dict = OrderedDict((re.sub(r'^module\.', '', k), v) for k, v in checkpoint['state_dict'].items())
    hint = ("check init_cfg's checkpoint and prefix (prefix='backbone.' loads a classifier checkpoint's backbone "
            'into a backbone); load_from with --allow-partial loads whatever fits')
    if prefix:
        prefix = prefix if prefix.endswith('.') else prefix + '.'
        selected = OrderedDict((k[len(prefix):], v) for k, v in state_dict.items() if k.startswith(prefix))
        if not selected:
            raise CheckpointError(f"checkpoint {filename} has no key under init_cfg's prefix='{prefix}'; the file "
                                  f'looks like {_looks_like(checkpoint, state_dict)}; {hint}')
        state_dict = selected
    report = load_state_dict_checked(module, state_dict)
    check_fit(module, report, filename, {**checkpoint, 'state_dict': state_dict}, hint)
    print_log(f'init_cfg Pretrained {filename}' + (f' ({prefix})' if prefix else '') + f': {report.describe()}',
              logger='current', level=logging.INFO if report.clean else logging.WARNING)
    return report


class AtomicLocalBackend(LocalBackend):
    """mmengine's :class:`LocalBackend` whose writes are atomic.

    ``put`` / ``put_text`` write to a temporary file in the destination folder, flush it to disk and
    ``os.replace`` it over the final name: a reader sees the old file or the complete new one, and a
    process killed while writing leaves at most a hidden ``.<name>.*.tmp`` file, never a truncated
    file under the final name.
    """

    def put(self, obj: bytes, filepath) -> None:
        filepath = str(filepath)
        folder = osp.dirname(osp.abspath(filepath))
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f'.{osp.basename(filepath)}.', suffix='.tmp', dir=folder)
        try:
            with os.fdopen(fd, 'wb') as f:
                f.write(obj)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, filepath)
        except BaseException:
            if osp.exists(tmp):
                os.remove(tmp)
            raise

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
