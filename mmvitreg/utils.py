"""Config and command-line helpers shared by the tools in ``tools/``: reading and checking a config, its data
(:func:`check_data`) and its model; building the model and the data a tool analyses (:func:`build_model`)."""

import argparse
import difflib
import importlib.util
import logging
import os
import os.path as osp
import sys
import warnings
from typing import Iterable, Iterator, Optional, Tuple

import torch
from mmengine.config import Config, DictAction
from mmengine.dist import init_dist as mmengine_init_dist
from mmengine.model import MMDistributedDataParallel, revert_sync_batchnorm
from mmengine.utils import scandir
from torch import nn

from mmvitreg.registry import MODEL_WRAPPERS

SCOPES = ('mmpretrain', 'mmseg', 'mmdet')


class ConfigError(ValueError):
    """A config that cannot be used, with a message that says why."""


def check_plugin_types(cfg) -> None:
    """Fail early, with the known names, on any ``type='mmvitreg.X'`` that no registry holds (the models built
    on mmseg's or mmdet's are imported only for a name the others do not hold: ``HostedRegistry``)."""
    from mmengine.registry import Registry

    from mmvitreg import registry

    registries = [r for r in vars(registry).values() if isinstance(r, Registry) and r.scope == 'mmvitreg']
    for reg in registries:
        reg.import_from_location()

    def walk(node, where):
        if isinstance(node, dict):
            t = node.get('type')
            if isinstance(t, str) and t.startswith('mmvitreg.'):
                name = t.split('.', 1)[1]
                if not any(name in reg.module_dict for reg in registries) and registry.MODELS.get(t) is None:
                    known = sorted({n for reg in registries for n in reg.module_dict})
                    close = difflib.get_close_matches(name, known, n=3)
                    hint = f' Did you mean {", ".join("mmvitreg." + c for c in close)}?' if close else ''
                    raise ConfigError(
                        f'unknown component type {t!r} at {where}.{hint} mmvitreg provides: {", ".join(known)}'
                    )
            for k, v in node.items():
                walk(v, f'{where}.{k}')
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f'{where}[{i}]')

    walk(cfg._cfg_dict.to_dict(), 'cfg')


def _library_missing(path: str, library: str) -> str:
    from mmvitreg.models.unavailable import extra_command

    return f'{path} is a config of {library}, which is not installed: {extra_command(library)}'


def load_config(path: str, cfg_options: Optional[dict] = None) -> Config:
    """Read a config of mmpretrain, mmseg or mmdet, merge ``--cfg-options`` and check it.

    Raises:
        ConfigError: no such file, a ``default_scope`` not among :data:`SCOPES`, its library not installed (the
            extras ``seg`` and ``det``), or an ``mmvitreg.X`` type that does not exist.
    """
    if not osp.isfile(path):
        raise ConfigError(f'config file not found: {path!r} (working directory: {osp.abspath(".")})')
    try:
        with warnings.catch_warnings():  # mmengine 0.10 finds a `pkg::` base through pkg_resources, which warns
            warnings.filterwarnings('ignore', 'pkg_resources is deprecated', UserWarning)
            cfg = Config.fromfile(path)
    except ModuleNotFoundError as error:  # `_base_ = 'mmseg::...'`: mmengine names the missing distribution
        from mmengine.config.utils import MODULE2PACKAGE

        for library in ('mmseg', 'mmdet'):
            if importlib.util.find_spec(library) is None and MODULE2PACKAGE.get(library, library) in str(error):
                raise ConfigError(_library_missing(path, library)) from None
        raise
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise ConfigError(
            f'{path}: default_scope is {scope!r}; mmvitreg tools serve configs of '
            f'{", ".join(SCOPES)} (inherit one of their default_runtime.py)'
        )
    if scope in ('mmseg', 'mmdet') and importlib.util.find_spec(scope) is None:
        raise ConfigError(_library_missing(path, scope))
    check_plugin_types(cfg)
    return cfg


def set_run_args(cfg: Config, args: argparse.Namespace) -> None:
    """Set the launcher, the work dir (``--work-dir``, else the config's, else ``./work_dirs/<config name>``) and
    ``--no-pin-memory`` / ``--no-persistent-workers`` in every dataloader, as mmpretrain's tools do. Without CUDA
    the backend is gloo (NCCL needs GPUs); a distributed run then starts it here (:func:`init_dist`) and wraps the
    model in :class:`CPUDistributedDataParallel`."""
    cfg.launcher = args.launcher
    cfg.work_dir = (
        args.work_dir or cfg.get('work_dir') or osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    )
    off = [opt for opt in ('pin_memory', 'persistent_workers') if getattr(args, f'no_{opt}', False)]
    for split in ('train', 'val', 'test'):
        loader = cfg.get(f'{split}_dataloader')
        if loader:
            loader.update({opt: False for opt in off})
    if not torch.cuda.is_available():
        dist_cfg = cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})
        if dist_cfg.get('backend', 'nccl') == 'nccl':
            dist_cfg['backend'] = 'gloo'
        if args.launcher != 'none':  # mmengine's Runner keeps this process group, and DDP takes no device_ids here
            init_dist(args.launcher, **dist_cfg)
            wrapper = cfg.get('model_wrapper_cfg') or dict(  # what mmengine's wrap_model gives its own wrapper
                broadcast_buffers=False, find_unused_parameters=cfg.get('find_unused_parameters', False)
            )
            if wrapper.get('type', 'MMDistributedDataParallel') == 'MMDistributedDataParallel':
                cfg.model_wrapper_cfg = {**wrapper, 'type': 'mmvitreg.CPUDistributedDataParallel'}


def init_dist(launcher: str, **dist_cfg) -> None:
    """mmengine's ``init_dist``; for ``--launcher pytorch`` without CUDA (where mmengine 0.10's calls
    ``torch.cuda.set_device``) a gloo process group from ``torch.distributed.run``'s environment."""
    if launcher == 'pytorch' and not torch.cuda.is_available():
        torch.distributed.init_process_group(backend='gloo')
    else:
        mmengine_init_dist(launcher, **dist_cfg)


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """mmengine's DDP wrapper for a CPU module (:func:`set_run_args`): without ``device_ids`` (DDP refuses them for a
    CPU module) and with SyncBN reverted to BN (SyncBN refuses CPU tensors)."""

    def __init__(self, module: nn.Module, device_ids=None, **kwargs):
        super().__init__(module=revert_sync_batchnorm(module), **kwargs)


IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif', '.tiff', '.webp')


def _datasets(node, where: str) -> Iterator[Tuple[dict, str]]:
    """Every leaf dataset config under ``node`` (through ``RepeatDataset`` / ``ConcatDataset`` wrappers)."""
    if not isinstance(node, dict):
        return
    if isinstance(node.get('dataset'), dict):
        yield from _datasets(node['dataset'], f'{where}.dataset')
    elif isinstance(node.get('datasets'), (list, tuple)):
        for i, child in enumerate(node['datasets']):
            yield from _datasets(child, f'{where}.datasets[{i}]')
    else:
        yield node, where


def check_data(cfg, splits: Iterable[str] = ('train', 'val', 'test')) -> None:
    """Fail (:class:`ConfigError`, naming the key and the path) when the data of ``<split>_dataloader`` is missing:
    a ``data_root`` or annotation file that does not exist, an empty text list, or an image folder with no image.
    Without it a wrong ``data_root`` surfaces deep inside a dataset constructor after the model was built, and an
    empty annotation file trains zero iterations per epoch silently."""
    for split in splits:
        loader = cfg.get(f'{split}_dataloader')
        if not loader:
            continue
        for dataset, where in _datasets(loader.get('dataset'), f'{split}_dataloader.dataset'):
            root = dataset.get('data_root') or ''
            if root and not osp.isdir(root):
                raise ConfigError(
                    f'{where}.data_root {root!r} does not exist (working directory {os.getcwd()}); '
                    'build the data set or set --cfg-options '
                    f'{where}.data_root=<folder>'
                )
            ann = dataset.get('ann_file') or ''
            if ann:
                path = ann if osp.isabs(ann) else osp.join(root, ann)
                if not osp.isfile(path):
                    raise ConfigError(f'{where}.ann_file {path!r} does not exist')
                if path.endswith('.txt'):
                    with open(path) as f:
                        if not any(line.strip() for line in f):
                            raise ConfigError(f'{where}.ann_file {path!r} holds no images (the file is empty)')
                continue
            prefix = dataset.get('data_prefix') or ''
            prefix = prefix.get('img_path', prefix.get('img', '')) if isinstance(prefix, dict) else prefix
            folder = prefix if osp.isabs(prefix) else osp.join(root, prefix)
            if root and osp.isdir(folder) and not any(scandir(folder, IMAGE_SUFFIXES, True, False)):
                raise ConfigError(f'{where}: the image folder {folder!r} holds no images ({", ".join(IMAGE_SUFFIXES)})')


def check_trace_users(cfg: Config) -> None:
    """Run the build-time checks of a :class:`~mmvitreg.models.trace_users.TraceUsers` model's trace users before the
    runner starts: the model is built once and dropped, on the meta device (on the CPU when a constructor reads
    tensor values), without drawing from the global random generator.

    Raises:
        ConfigError: a trace user the backbone or the model kind refuses (:class:`TraceUserError`'s message).
    """
    from mmengine.registry import MODELS, DefaultScope

    from mmvitreg.models.trace import TraceUserError
    from mmvitreg.models.trace_users import TraceUsers

    model = cfg.get('model')
    model_type = model.get('type') if isinstance(model, dict) else None
    ours = isinstance(model_type, str) and model_type.startswith('mmvitreg.')
    cls = MODELS.get(model_type) if ours else None  # mmvitreg's registry, by the scope
    if not (isinstance(cls, type) and issubclass(cls, TraceUsers)):
        return
    model = model.copy()
    model.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    with DefaultScope.overwrite_default_scope(cfg.default_scope), torch.random.fork_rng(devices=[]):
        for device in ('meta', 'cpu'):
            try:
                with torch.device(device):
                    MODELS.build(model)
                return
            except TraceUserError as e:
                raise ConfigError(f'model: {e}') from None
            except Exception:  # noqa: BLE001  (on meta: a constructor that computes; on cpu: the runner reports it)
                continue


def build_runner(cfg):
    """The runner a config asks for (``runner_type``), else mmengine's ``Runner``; an mmseg or mmdet run logs which
    code serves mmcv's ops (:func:`mmvitreg.mmcv_ops.backend`).

    Raises:
        ConfigError: a trace user the backbone cannot serve (:func:`check_trace_users`), or a component that
            refuses its settings (e.g. ``num_classes=0``): one line, the component's message.
    """
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    check_trace_users(cfg)
    try:
        runner = RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)
    except (ValueError, TypeError, KeyError, AssertionError) as e:  # a component's own check of its settings
        text = (e.args[0] if isinstance(e, KeyError) and e.args else str(e)).strip().splitlines()
        raise ConfigError(
            f'the config does not build ({type(e).__name__}): {text[0] if text else type(e).__name__}'
            '; fix the setting it names'
        ) from e
    if cfg.get('default_scope') in ('mmseg', 'mmdet'):
        from mmvitreg.mmcv_ops import backend

        runner.logger.info(backend())
    return runner


def parse_tool_args(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """Add the flags every tool shares (``--cfg-options``, ``--launcher``, ``--local-rank``) and parse."""
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, e.g. train_dataloader.batch_size=8',
    )
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


#: the opt-out a tool's strict load names
PARTIAL_HINT = 'use a checkpoint of this config, or pass --allow-partial (allow_partial=True) to use the keys that fit'


def build_model(cfg: Config, checkpoint, device: str, allow_partial: bool = False) -> nn.Module:
    """The model of ``cfg`` (its ``data_preprocessor`` filled in as mmengine's Runner does) on ``device``, in eval
    mode, inside ``cfg.default_scope``: ``checkpoint`` loaded when given
    (:func:`mmvitreg.engine.checkpoint.load_weights`: every parameter, or with ``allow_partial`` the keys that fit),
    else the config's initialisation (without mmengine's per-parameter init log).

    Raises:
        mmvitreg.engine.CheckpointError: a checkpoint that cannot be read or does not fit.
    """
    from mmengine.logging import MMLogger
    from mmengine.registry import MODELS

    from mmvitreg.engine.checkpoint import load_weights

    model_cfg = cfg.model.copy()
    model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    model = MODELS.build(model_cfg)
    if checkpoint:
        load_weights(model, checkpoint, 'partial' if allow_partial else 'strict', hint=PARTIAL_HINT)
    else:
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel(logging.WARNING)  # init_weights logs every parameter's initialiser at INFO
        try:
            model.init_weights()
        finally:
            logger.setLevel(level)
    return model.to(device).eval()


def build_dataloader(cfg: Config, split: str, batch_size: int, num_workers: int):
    """The config's ``<split>_dataloader`` in a fixed order with the given batch size and workers (a
    :class:`ConfigError` if it has none)."""
    from mmengine.runner import Runner

    key = f'{split}_dataloader'
    if not cfg.get(key):
        raise ConfigError(f'the config has no {key}')
    loader_cfg = cfg[key].copy()
    loader_cfg.update(batch_size=batch_size, num_workers=num_workers, persistent_workers=False)
    loader_cfg.sampler = dict(type='DefaultSampler', shuffle=False)
    return Runner.build_dataloader(loader_cfg)


def first_images(batches: Iterable[dict], num_images: int, split: str = 'data') -> Iterator[Tuple[dict, int]]:
    """``(batch, take)`` for the batches that hold the first ``num_images`` images (the first ``take`` of each), with
    a progress bar and a note when the ``split`` holds fewer."""
    from mmengine.utils import ProgressBar

    progress = ProgressBar(num_images, file=sys.stdout)
    seen = 0
    for batch in batches:
        take = min(len(batch['inputs']), num_images - seen)
        yield batch, take
        seen += take
        progress.update(take)
        if seen >= num_images:
            break
    sys.stdout.write('\n')
    if seen < num_images:
        print(f'note: the {split} split holds only {seen} images, fewer than the {num_images} asked')
