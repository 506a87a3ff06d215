"""Every workaround the OpenMMLab stack needs, in one place, each applied only where it is needed.

:func:`apply` is idempotent. ``import mmvitreg`` calls it, and so does every tool in ``tools/``
before it reads a config, so users never set an environment variable or edit a config for these.
Each patch is a :class:`Patch` with a gate, :attr:`Patch.needed`, that reads the *installed* versions
(:func:`installed_version`): on a stack that does not need a patch it is not applied, and
:func:`needed` / :func:`applied` list which ones are (``tools/check_stack.sh`` prints both).
Each names the upstream issue it answers; when a released mmengine carries the fix, the gate's upper
bound says so and the patch is removed once the oldest supported mmengine has it.

1. ``checkpoint_weights_only`` (torch >= 2.6) - safe checkpoint loading. torch 2.6 made
   ``torch.load(weights_only=True)`` the default, and mmengine 0.10.x cannot load its own checkpoints
   (``load_from``, ``--resume``, ``tools/test.py``): their ``message_hub`` pickles ``HistoryBuffer`` and
   numpy scalars (mmengine #1655; mmengine PR #1670, 0.11). We re-register mmengine's local-file checkpoint loader (the
   one every library's ``load_checkpoint`` reads local files with) and its ``http(s)://`` / ``s3://`` loaders (now
   fetching through ``mmengine.fileio``) with :func:`mmvitreg.fileio.load_checkpoint`, the package's allow-listed
   reader (``weights_only=True`` plus exactly what mmengine's, this package's and the official releases' checkpoints
   contain). The gate has no mmengine bound: whatever mmengine does, this loader is the one that decides.
2. ``cpu_distributed`` (mmengine < 0.11) - with ``--launcher pytorch`` on a machine without CUDA,
   mmengine 0.10.x calls ``torch.cuda.set_device`` unconditionally (``mmengine/dist/utils.py``), its
   configs ask for the NCCL backend, ``Runner.wrap_model`` passes ``device_ids=[LOCAL_RANK]`` to DDP,
   which rejects it for CPU modules, and SyncBN layers refuse CPU tensors. Not fixed upstream (to be
   re-checked on mmengine 0.11). Without CUDA we initialise the process group with gloo and skip
   ``set_device``; the DDP wrapper drops ``device_ids`` and reverts SyncBN to BN for a CPU module.
   With CUDA both fall through to mmengine's own code.
3. ``package_lookup`` (mmengine < 0.11 without ``pkg_resources``, or mmvitreg installed editable) -
   ``_base_ = 'mmseg::...'`` goes through ``mmengine.utils.is_installed`` / ``get_installed_path``, which
   import ``pkg_resources``; setuptools >= 82 no longer ships it, and the lookup fails. mmengine PR #1676
   (``main`` only). An editable install of mmvitreg (the quick start's) is the other case: ``pkg_resources``
   answers the folder of its metadata in site-packages, whose ``.mim`` holds pointers into the checkout
   (``setup.py``) that mmengine's metafile reader cannot follow (``KeyError: 'Models'``), while the package
   imported is the checkout's. There we answer both questions with ``importlib.metadata`` /
   ``importlib.util`` (the module that imports); elsewhere mmengine's own lookup runs.
4. ``mmvitreg_config_scope`` (any mmengine that does not know ``mmvitreg``) - ``_base_ =
   'mmvitreg::lvvit/...'`` in a config of one's own: mmengine resolves ``pkg::`` only for the packages of
   its fixed table ``MODULE2PACKAGE``, so we add ``mmvitreg`` to it. mmengine also stamps
   ``_scope_='<pkg>'`` on every top-level dict of a ``pkg::`` base, which is right for mmpretrain,
   mmseg and mmdet (each has its own registry tree) but wrong for ours: an mmvitreg config is written
   for its library's ``default_scope`` (``mmpretrain``, ``mmseg`` or ``mmdet``, inherited with it) and
   reaches our components as ``mmvitreg.X`` from there, so a ``_scope_='mmvitreg'`` stamp would send
   e.g. its data set or optimizer to a scope that does not have them. ``mmvitreg::`` bases are
   therefore read like local ``_base_`` files (no stamp); the dicts they inherit from
   ``mmpretrain::``/``mmseg::``/``mmdet::`` keep those stamps.
5. ``compile_model_loss`` (mmengine >= 0.7, < 0.11: every release with ``cfg.compile``) - with
   ``compile=True`` (or a dict of ``torch.compile`` options) ``Runner.train`` compiles the whole
   ``model.train_step``, the optimizer step included, and dynamo fails inside ``Adam.step`` on torch 2.x
   ("'UserDefinedDictVariable' object has no attribute 'items'"), for every config. Not fixed upstream
   (mmengine 0.10.7 is the latest release). We compile the model's training forward, ``model.loss``
   (:func:`compile_loss`: the backbone, the trace users and the losses; mmpretrain, mmseg and mmdet
   models all route ``mode='loss'`` there), and leave data preprocessing, the backward and the optimizer
   step eager. The options of ``cfg.compile`` go to ``torch.compile`` as before.
6. ``multimodal_off`` (mmpretrain < 1.3 with transformers >= 5 and pycocotools installed) - mmpretrain 1.2.0
   turns its multimodal models (BLIP, CLIP, Flamingo, ...) on when the installed distributions satisfy
   ``pycocotools`` and ``transformers>=4.28.0`` (``WITH_MULTIMODAL`` in ``mmpretrain/utils/dependency.py``,
   read from metadata, not from an import), and under transformers 5 their ``class
   BertPreTrainedModel(PreTrainedModel)`` fails, so ``import mmpretrain.models`` raises and no config
   builds. mmpretrain 1.2.0 is its latest release (no upstream fix). We set ``WITH_MULTIMODAL`` to False
   before mmpretrain's models or data sets are imported (they then register mmpretrain's own
   "install the multimodal extras" placeholders) and warn once, naming both versions.
7. ``mmvitreg_model_loading`` (any mmengine: it has no per-model checkpoint conversion) - strict inference loading
   of **mmvitreg's models only** (:func:`is_mmvitreg_model`: the model or one of its modules is an mmvitreg class):
   mmengine's ``load_checkpoint`` (mmpretrain's ``get_model`` and inferencers) and mmengine's ``BaseInferencer``
   hand the read checkpoint to a private function, ``_load_checkpoint_to_model``, which loads whatever fits with
   one warning. For an mmvitreg model, and only for one, it goes to ``mmvitreg.Pretrained.load_checkpoint_dict``
   (an official release converted, every parameter must load unless inside ``mmvitreg.engine.partial_loading()``);
   any other model calls mmengine's own function with the same arguments. ``mmengine.infer.infer`` imports that
   function by name, so it is imported here and patched too, whatever the import order. This is the one patch
   without an upstream defect: a model cannot choose how ``load_checkpoint`` fills it (a load-state-dict hook sees
   neither the release layout nor the whole model's missing keys). ``init_cfg=dict(type='Pretrained')`` is *not*
   patched: mmvitreg's backbones send their own to ``mmvitreg.Pretrained`` (their ``init_weights`` adds
   ``_scope_='mmvitreg'``), and any other model's config can ask for it the same way.
"""
import importlib.metadata
import importlib.util
import json
import os.path as osp
import warnings
from dataclasses import dataclass
from typing import Callable, List, Optional

import torch
import torch.distributed as torch_dist
from packaging.version import Version

from mmvitreg.fileio import load_checkpoint

_applied: List[str] = []


def installed_version(distribution: str) -> Optional[Version]:
    """The installed version of ``distribution`` (e.g. ``'torch'``), or ``None`` if it is absent.

    Local labels are dropped (``2.14.1+cpu`` -> ``2.14.1``). The gates read versions through this one
    function, so the tests fake a stack by monkeypatching it.
    """
    try:
        return Version(Version(importlib.metadata.version(distribution)).base_version)
    except importlib.metadata.PackageNotFoundError:
        return None


def _below(distribution: str, bound: str) -> bool:
    version = installed_version(distribution)
    return version is not None and version < Version(bound)


def _at_least(distribution: str, bound: str) -> bool:
    version = installed_version(distribution)
    return version is not None and version >= Version(bound)


def _torch_allow_lists_globals() -> bool:
    """The gate of patch 1: torch >= 2.6 (``weights_only=True`` by default, allow-list entries by name)."""
    return _at_least('torch', '2.6')


def load_from_local(filename, map_location=None):
    """mmengine's local loader, reading through :func:`load_checkpoint` (patch 1; mmengine logs "Loads checkpoint by
    local backend", the name after ``load_from_``, as for its own)."""
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    return load_checkpoint(filename, map_location)


#: the remote schemes whose mmengine checkpoint loaders patch 1 replaces (fetched by mmengine's file backends)
REMOTE_SCHEMES = ('http://', 'https://', 's3://')


def load_from_remote(filename, map_location=None):
    """mmengine's loader of a remote checkpoint: fetched by ``mmengine.fileio.get_local_path``, read through
    :func:`load_checkpoint` (patch 1)."""
    from mmengine.fileio import get_local_path
    with get_local_path(filename) as local:
        return load_checkpoint(local, map_location, name=filename)


def _patch_checkpoint_loading():
    from mmengine.runner.checkpoint import CheckpointLoader
    CheckpointLoader.register_scheme(prefixes='', loader=load_from_local, force=True)
    CheckpointLoader.register_scheme(prefixes=REMOTE_SCHEMES, loader=load_from_remote, force=True)


def is_mmvitreg_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` or one of its modules is an mmvitreg class (patch 7 applies to it)."""
    return any(type(m).__module__.startswith('mmvitreg.') for m in model.modules())


def _mmvitreg_pretrained():
    """The ``mmvitreg.Pretrained`` initialiser class, through mmengine's registry (which imports the engine)."""
    from mmengine.registry import WEIGHT_INITIALIZERS
    return WEIGHT_INITIALIZERS.get('mmvitreg.Pretrained')


def _patch_mmvitreg_model_loading():
    import mmengine.infer.infer as infer
    import mmengine.runner.checkpoint as runner_checkpoint

    load_to_model = runner_checkpoint._load_checkpoint_to_model

    def load_to_mmvitreg_models(model, checkpoint, strict=False, logger=None, revise_keys=[(r'^module.', '')]):
        if not is_mmvitreg_model(model):
            return load_to_model(model, checkpoint, strict, logger, revise_keys)
        return _mmvitreg_pretrained().load_checkpoint_dict(model, checkpoint, strict, revise_keys)

    runner_checkpoint._load_checkpoint_to_model = load_to_mmvitreg_models
    infer._load_checkpoint_to_model = load_to_mmvitreg_models  # imported by name there: patched in both places


def _patch_cpu_distributed():
    import mmengine.dist.utils as dist_utils
    from mmengine.model import MMDistributedDataParallel, revert_sync_batchnorm

    cuda_init = dist_utils._init_dist_pytorch

    def init_dist_pytorch(backend, init_backend='torch', **kwargs):
        if torch.cuda.is_available():
            return cuda_init(backend, init_backend=init_backend, **kwargs)
        torch_dist.init_process_group(backend='gloo', **kwargs)

    dist_utils._init_dist_pytorch = init_dist_pytorch

    ddp_init = MMDistributedDataParallel.__init__

    def ddp_init_cpu_aware(self, module, detect_anomalous_params=False, **kwargs):
        param = next(module.parameters(), None)
        if param is not None and param.device.type == 'cpu':
            kwargs.pop('device_ids', None)
            module = revert_sync_batchnorm(module)
        ddp_init(self, module=module, detect_anomalous_params=detect_anomalous_params, **kwargs)

    MMDistributedDataParallel.__init__ = ddp_init_cpu_aware


def is_installed(package: str) -> bool:
    """Whether ``package`` (a distribution or an importable module) is installed (patch 3)."""
    try:
        importlib.metadata.distribution(package)
        return True
    except importlib.metadata.PackageNotFoundError:
        return importlib.util.find_spec(package) is not None


def get_installed_path(package: str) -> str:
    """Directory of the installed module ``package`` (e.g. ``mmseg``) (patch 3)."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        # a distribution name whose top-level module differs (e.g. 'mmsegmentation' -> 'mmseg')
        dist = importlib.metadata.distribution(package)
        module = (dist.read_text('top_level.txt') or package).split()[0]
        spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(f'cannot locate the installed package {package!r}')
    return osp.dirname(spec.origin)


def _patch_package_lookup():
    import mmengine.config.config as config_module
    import mmengine.utils as utils
    import mmengine.utils.package_utils as package_utils
    for module in (config_module, utils, package_utils):
        module.is_installed = is_installed
        module.get_installed_path = get_installed_path


def _register_mmvitreg_config_scope():
    from mmengine.config import Config
    from mmengine.config.utils import MODULE2PACKAGE

    MODULE2PACKAGE['mmvitreg'] = 'mmvitreg'
    get_cfg_path = Config._get_cfg_path

    def get_cfg_path_unscoped(cfg_path, filename):
        path, scope = get_cfg_path(cfg_path, filename)
        return path, (None if scope == 'mmvitreg' else scope)

    Config._get_cfg_path = staticmethod(get_cfg_path_unscoped)


def _pkg_resources_missing() -> bool:
    """Whether ``pkg_resources`` is absent (setuptools >= 82), without importing it (part of patch 3's gate)."""
    return importlib.util.find_spec('pkg_resources') is None


def _mmvitreg_editable() -> bool:
    """Whether mmvitreg is an editable install (PEP 610 ``direct_url.json``; part of patch 3's gate)."""
    try:
        direct_url = importlib.metadata.distribution('mmvitreg').read_text('direct_url.json') or '{}'
    except importlib.metadata.PackageNotFoundError:
        return False
    return bool(json.loads(direct_url).get('dir_info', {}).get('editable'))


def _mmengine_lacks_mmvitreg() -> bool:
    from mmengine.config.utils import MODULE2PACKAGE
    return 'mmvitreg' not in MODULE2PACKAGE


def compile_loss(model: torch.nn.Module, **options) -> torch.nn.Module:
    """Compile ``model.loss`` (the training forward) with ``torch.compile(**options)``, in place (patch 5).

    A wrapped model (DDP, mmengine's wrappers: a model that trains has no other wrapper) has its inner
    module's ``loss`` compiled. Returns ``model``.
    """
    from mmengine.model import is_model_wrapper
    inner = model
    while is_model_wrapper(inner):
        inner = inner.module
    inner.loss = torch.compile(inner.loss, **options)
    return model


def _patch_compile_model_loss():
    from mmengine.runner import Runner

    maybe_compile = Runner._maybe_compile

    def maybe_compile_loss(self, target: str) -> None:
        options = self.cfg.get('compile', None)
        if target != 'train_step' or options is None or options is False:
            return maybe_compile(self, target)
        compile_loss(self.model, **({} if options is True else dict(options)))
        self.logger.info('model.loss has been compiled (the optimizer step stays eager: mmvitreg.compat '
                         'compile_model_loss); the first iterations will be slow.')

    Runner._maybe_compile = maybe_compile_loss


def _multimodal_breaks_mmpretrain() -> bool:
    """The gate of patch 6: mmpretrain < 1.3 would enable its multimodal models (``pycocotools`` and a
    ``transformers`` installed) and the installed transformers is 5 or newer, which they cannot import."""
    return (_below('mmpretrain', '1.3') and installed_version('pycocotools') is not None
            and _at_least('transformers', '5'))


def _turn_multimodal_off():
    """Patch 6: mmpretrain's ``WITH_MULTIMODAL`` set to False before its models are imported, with one warning."""
    from mmpretrain.utils import dependency  # mmpretrain's top level, not its models
    dependency.WITH_MULTIMODAL = False
    warnings.warn(f'mmpretrain {installed_version("mmpretrain")}\'s multimodal models (BLIP, CLIP, Flamingo, ...) '
                  f'need transformers < 5, and transformers {installed_version("transformers")} is installed: '
                  'mmvitreg turned them off (mmvitreg.compat multimodal_off) so that mmpretrain.models imports; '
                  'install "transformers>=4.28,<5" to use them', stacklevel=3)


@dataclass(frozen=True)
class Patch:
    """One workaround: its name, the upstream reference, the gate and the patch itself.

    Args:
        name (str): short name, as listed by :func:`needed` and :func:`applied`.
        upstream (str): the upstream issue / pull request it answers.
        needed (Callable[[], bool]): whether the installed stack needs it (reads
            :func:`installed_version`).
        patch (Callable[[], None]): applies it (called at most once per process).
    """
    name: str
    upstream: str
    needed: Callable[[], bool]
    patch: Callable[[], None]


PATCHES = (
    Patch('checkpoint_weights_only', 'mmengine #1655, PR #1670 (mmengine 0.11); our allow-list on any mmengine',
          _torch_allow_lists_globals, _patch_checkpoint_loading),
    Patch('cpu_distributed', 'not fixed upstream (mmengine 0.10.7)',
          lambda: _below('mmengine', '0.11'), _patch_cpu_distributed),
    Patch('package_lookup', 'mmengine PR #1676 (mmengine 0.11)',
          lambda: _below('mmengine', '0.11') and (_pkg_resources_missing() or _mmvitreg_editable()),
          _patch_package_lookup),
    Patch('mmvitreg_config_scope', 'mmengine MODULE2PACKAGE has a fixed list of packages',
          _mmengine_lacks_mmvitreg, _register_mmvitreg_config_scope),
    Patch('compile_model_loss', 'not fixed upstream (mmengine 0.10.7 compiles the whole train_step)',
          lambda: _below('mmengine', '0.11'), _patch_compile_model_loss),
    Patch('multimodal_off', 'not fixed upstream (mmpretrain 1.2.0 is the latest release)',
          _multimodal_breaks_mmpretrain, _turn_multimodal_off),
    Patch('mmvitreg_model_loading', 'not an upstream defect: mmengine has no per-model checkpoint conversion',
          lambda: installed_version('mmengine') is not None, _patch_mmvitreg_model_loading),
)


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
