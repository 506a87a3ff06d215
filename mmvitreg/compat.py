"""The workarounds ``import mmvitreg`` applies to its hosts where the installed versions need them (what each
changes and why: docs/workarounds.md). None changes what a host function does for a model with no mmvitreg module.
"""

import importlib.metadata
import os.path as osp
import warnings
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, List, Optional

import torch
from packaging.version import Version

_applied: List[str] = []


def installed_version(distribution: str) -> Optional[Version]:
    """The installed version of ``distribution`` without local label (``2.14.1+cpu`` -> ``2.14.1``), or ``None``;
    the one reader of the gates, which the tests monkeypatch to fake a stack."""
    try:
        return Version(Version(importlib.metadata.version(distribution)).base_version)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_mmvitreg_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` or one of its modules is an mmvitreg class (``mmvitreg_model_loading`` applies to it)."""
    return any(type(m).__module__.startswith('mmvitreg.') for m in model.modules())


@dataclass(frozen=True)
class Patch:
    """One workaround: its name (as :func:`needed` and :func:`applied` list it), the upstream issue it answers,
    its gate ``needed()`` (whether the installed stack needs it) and ``patch()`` (applied at most once)."""

    name: str
    upstream: str
    needed: Callable[[], bool]
    patch: Callable[[], None]


PATCHES: List[Patch] = []


def workaround(name: str, upstream: str, needed: Callable[[], bool]):
    """Register the decorated function as the :class:`Patch` ``name`` (:data:`PATCHES` keeps their order)."""

    def register(patch: Callable[[], None]):
        PATCHES.append(Patch(name, upstream, needed, patch))
        return patch

    return register


def _mmengine_lacks_mmvitreg() -> bool:
    from mmengine.config.utils import MODULE2PACKAGE

    return 'mmvitreg' not in MODULE2PACKAGE


@workaround('mmvitreg_config_scope', 'mmengine MODULE2PACKAGE has a fixed list of packages', _mmengine_lacks_mmvitreg)
def _register_mmvitreg_config_scope():
    """``_base_ = 'mmvitreg::...'``: ``mmvitreg`` joins mmengine's ``MODULE2PACKAGE``, and such a path is read
    from the imported package by mmengine's own metafile and ``.mim/configs`` readers."""
    from mmengine.config import Config
    from mmengine.config.utils import MODULE2PACKAGE, _get_external_cfg_base_path, _get_external_cfg_path

    MODULE2PACKAGE['mmvitreg'] = 'mmvitreg'
    get_cfg_path = Config._get_cfg_path
    package = osp.dirname(osp.abspath(__file__))

    def get_cfg_path_of_mmvitreg(cfg_path, filename):
        scope, _, name = cfg_path.partition('::')
        if scope != 'mmvitreg':
            return get_cfg_path(cfg_path, filename)
        try:
            return _get_external_cfg_path(package, name), None
        except ValueError:  # not a model of the metafiles: a file under .mim/configs, as mmengine reads it
            return _get_external_cfg_base_path(package, name), None

    Config._get_cfg_path = staticmethod(get_cfg_path_of_mmvitreg)


def _multimodal_breaks_mmpretrain() -> bool:
    """mmpretrain < 1.3 would enable its multimodal models (``pycocotools`` and a ``transformers`` installed) and
    the installed transformers is 5 or newer, which they cannot import."""
    mmpretrain, transformers = installed_version('mmpretrain'), installed_version('transformers')
    if mmpretrain is None or transformers is None or installed_version('pycocotools') is None:
        return False
    return mmpretrain < Version('1.3') and transformers >= Version('5')


@workaround(
    'multimodal_off', 'not fixed upstream (mmpretrain 1.2.0 is the latest release)', _multimodal_breaks_mmpretrain
)
def _turn_multimodal_off():
    """mmpretrain's ``WITH_MULTIMODAL`` set to False before its models are imported, with one warning."""
    from mmpretrain.utils import dependency  # mmpretrain's top level, not its models

    dependency.WITH_MULTIMODAL = False
    warnings.warn(
        f'mmpretrain {installed_version("mmpretrain")}\'s multimodal models (BLIP, CLIP, Flamingo, ...) '
        f'need transformers < 5, and transformers {installed_version("transformers")} is installed: '
        'mmvitreg turned them off (mmvitreg.compat multimodal_off) so that mmpretrain.models imports; '
        'install "transformers>=4.28,<5" to use them',
        stacklevel=3,
    )


#: whether mmengine's checkpoint reader reads for a model holding an mmvitreg module
_MMVITREG_READ = ContextVar('mmvitreg_model_read', default=False)
#: the modules that import mmengine's ``load_checkpoint`` by name
_LOAD_CHECKPOINT_HOLDERS = (
    'mmengine.runner.checkpoint',
    'mmengine.runner',
    'mmpretrain.apis.base',
    'mmseg.apis.inference',
    'mmdet.apis.inference',
)


@workaround(
    'mmvitreg_model_loading',
    'not an upstream defect: mmengine has no per-model checkpoint conversion',
    lambda: installed_version('mmengine') is not None,
)
def _patch_mmvitreg_model_loading():
    """A model holding an mmvitreg module, in mmengine's loaders (``Runner.load_checkpoint``, ``load_checkpoint``,
    ``BaseInferencer``: the hosts' tools, ``get_model``, ``init_model``): a local file is read by
    :func:`mmvitreg.fileio.read_checkpoint` instead of a bare ``torch.load``, a URL by mmengine with that
    allow-list, and the checkpoint goes to :func:`mmvitreg.engine.checkpoint.fill_model`. Functions that modules
    imported by name are replaced there too. Any other model goes through mmengine's own functions."""
    import sys

    import mmengine.infer.infer as infer
    import mmengine.runner.checkpoint as runner_checkpoint
    import mmengine.runner.runner as runner

    read, load_to_model = runner_checkpoint._load_checkpoint, runner_checkpoint._load_checkpoint_to_model
    load_checkpoint, runner_load_checkpoint = runner_checkpoint.load_checkpoint, runner.Runner.load_checkpoint

    def read_for_mmvitreg_models(filename, map_location=None, logger=None):
        if not _MMVITREG_READ.get():
            return read(filename, map_location, logger)
        from mmvitreg.fileio import checkpoint_globals, read_checkpoint

        if '://' not in str(filename):
            return read_checkpoint(filename, map_location)
        with checkpoint_globals():  # a URL: mmengine's download and cache (torch.hub's, rank 0 first), its torch.load
            return read(filename, map_location, logger)

    def load_to_mmvitreg_models(model, checkpoint, strict=False, logger=None, revise_keys=[(r'^module.', '')]):
        if not is_mmvitreg_model(model):
            return load_to_model(model, checkpoint, strict, logger, revise_keys)
        from mmvitreg.engine.checkpoint import fill_model

        return fill_model(model, checkpoint, revise_keys)

    def reading_for(model, load, *args, **kwargs):
        token = _MMVITREG_READ.set(is_mmvitreg_model(model))
        try:
            return load(*args, **kwargs)
        finally:
            _MMVITREG_READ.reset(token)

    def load_checkpoint_of_mmvitreg_models(model, *args, **kwargs):
        return reading_for(model, load_checkpoint, model, *args, **kwargs)

    def runner_load_checkpoint_of_mmvitreg_models(self, *args, **kwargs):
        return reading_for(self.model, runner_load_checkpoint, self, *args, **kwargs)

    for module in (runner_checkpoint, runner):
        module._load_checkpoint = read_for_mmvitreg_models
    for module in (runner_checkpoint, infer, runner):
        module._load_checkpoint_to_model = load_to_mmvitreg_models
    for name in _LOAD_CHECKPOINT_HOLDERS:
        if getattr(sys.modules.get(name), 'load_checkpoint', None) is load_checkpoint:
            sys.modules[name].load_checkpoint = load_checkpoint_of_mmvitreg_models
    runner.Runner.load_checkpoint = runner_load_checkpoint_of_mmvitreg_models


def needed() -> List[str]:
    """Names of the patches the installed stack needs (applied or not)."""
    return [p.name for p in PATCHES if p.name in _applied or p.needed()]


def applied() -> List[str]:
    """Names of the patches applied in this process, in order."""
    return list(_applied)


def apply() -> None:
    """Apply every needed patch once (idempotent)."""
    for p in PATCHES:
        if p.name not in _applied and p.needed():
            p.patch()
            _applied.append(p.name)
