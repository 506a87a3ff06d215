"""Every workaround the pinned OpenMMLab stack needs on torch 2.14, in one place.

:func:`apply` is idempotent. ``import mmvitreg`` calls it, and so does every tool in ``tools/``
before it reads a config, so users never set an environment variable or edit a config for these.
Each patch names the upstream issue it answers and is removed once a released mmengine carries the fix.

1. **Checkpoints** - torch >= 2.6 defaults ``torch.load(weights_only=True)``, and mmengine 0.10.7
   cannot load its own checkpoints (``load_from``, ``--resume``, ``tools/test.py``): their
   ``message_hub`` pickles ``HistoryBuffer`` and numpy scalars. Fixed upstream by mmengine PR #1670
   (issue #1655), on ``main`` only. We re-register mmengine's local-file checkpoint loader with
   ``weights_only=False``; checkpoints are trusted files the user points at, as before torch 2.6.
2. **CPU distributed training** - with ``--launcher pytorch`` on a machine without CUDA, mmengine
   0.10.7 calls ``torch.cuda.set_device`` unconditionally (``mmengine/dist/utils.py``), its configs
   ask for the NCCL backend, ``Runner.wrap_model`` passes ``device_ids=[LOCAL_RANK]`` to DDP, which
   rejects it for CPU modules, and SyncBN layers refuse CPU tensors. Not fixed upstream. Without
   CUDA we initialise the process group with gloo and skip ``set_device``; the DDP wrapper drops
   ``device_ids`` and reverts SyncBN to BN for a CPU module.
3. **Cross-repo ``_base_``** - ``_base_ = 'mmseg::...'`` goes through
   ``mmengine.utils.is_installed`` / ``get_installed_path``, which import ``pkg_resources``;
   setuptools >= 82 no longer ships it (mmengine PR #1676, ``main`` only). We answer both questions
   with ``importlib.metadata`` / ``importlib.util``, which is also faster (mmengine reloads
   ``pkg_resources`` on every lookup).
"""
import importlib.metadata
import importlib.util
import os.path as osp

import torch
import torch.distributed as torch_dist

_applied = False


def _load_local_checkpoint(filename, map_location=None):
    """mmengine's local loader, with ``weights_only=False`` (patch 1)."""
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    return torch.load(filename, map_location=map_location, weights_only=False)


def _patch_checkpoint_loading():
    from mmengine.runner.checkpoint import CheckpointLoader
    CheckpointLoader.register_scheme(prefixes='', loader=_load_local_checkpoint, force=True)


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


def apply() -> None:
    """Apply every workaround once (idempotent)."""
    global _applied
    if _applied:
        return
    _patch_checkpoint_loading()
    _patch_cpu_distributed()
    _patch_package_lookup()
    _applied = True
