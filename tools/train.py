"""Train an mmpretrain, mmseg or mmdet config (mmvitreg components or not).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--allow-partial] [--unsafe-load]
                                 [--amp [--amp-dtype D]]
                                 [--auto-scale-lr] [--no-validate] [--no-pin-memory] [--no-persistent-workers]
                                 [--cfg-options k=v ...] [--launcher pytorch]

The library is picked from the config's ``default_scope``; the stack workarounds of
``mmvitreg.compat`` are applied first. Distributed: ``bash tools/dist_train.sh CONFIG N``.
Runs are built with :class:`mmvitreg.engine.GuardedRunner`: ``--resume`` loads strictly (unless
``--allow-partial``), ``load_from`` partially with a one-line key summary (an official release is
converted on load; a file that fills less than 90% of the backbone, or has parameters the model has no place
for, stops the run unless ``--allow-partial``; remote files are fetched through mmengine's file backends),
checkpoints are written
atomically, the random generators are part of them (exact resume), and a non-finite loss stops the run.
Checkpoints are unpickled with ``weights_only=True`` and, for that read only, checked stand-ins of what checkpoints
hold (:func:`mmvitreg.fileio.load_checkpoint`); ``--unsafe-load`` unpickles anything, for trusted files only.
Token label maps are read by torch's own ``weights_only`` reader or numpy without pickle
(:mod:`mmvitreg.datasets.label_maps`).
A refused checkpoint, label map or non-finite loss or weights is one ``error:`` line, also from a DataLoader worker.
"""

import argparse
import logging
import os
import os.path as osp
import sys

import torch
from mmengine.logging import MMLogger, print_log

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.datasets.label_maps import LabelMapError
from mmvitreg.engine import CheckpointError, NonFiniteLossError
from mmvitreg.engine.checkpoint import is_local
from mmvitreg.fileio import UNSAFE_LOAD_ENV, UNSAFE_LOAD_HELP
from mmvitreg.utils import ConfigError, build_runner, check_data, load_config, parse_tool_args, set_run_args


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model (mmpretrain / mmseg / mmdet config)')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and checkpoints')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from this checkpoint, or from the latest one in the work dir if none is given',
    )
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='--resume from a checkpoint whose keys do not all fit the model, or load_from one that '
        'fills less than 90%% of the backbone',
    )
    parser.add_argument('--unsafe-load', action='store_true', help=UNSAFE_LOAD_HELP)
    parser.add_argument(
        '--amp', action='store_true', help='automatic mixed precision: float16 on CUDA, bfloat16 on CPU'
    )
    parser.add_argument(
        '--amp-dtype',
        choices=['float16', 'bfloat16'],
        help='the --amp dtype (default: float16 on CUDA, bfloat16 on CPU)',
    )
    parser.add_argument('--auto-scale-lr', action='store_true', help='scale the lr by the real batch size')
    parser.add_argument('--no-validate', action='store_true', help='do not evaluate during training')
    parser.add_argument('--no-pin-memory', action='store_true', help='switch pin_memory off in every dataloader')
    parser.add_argument(
        '--no-persistent-workers', action='store_true', help='switch persistent_workers off in every dataloader'
    )
    return parse_tool_args(parser, argv)


def build_train_config(args):
    cfg = load_config(args.config, args.cfg_options)
    set_run_args(cfg, args)
    cfg.setdefault('runner_type', 'mmvitreg.GuardedRunner')
    if args.allow_partial:
        cfg.checkpoint_policy = dict(load_from='partial', resume='partial')
    if args.unsafe_load:
        os.environ[UNSAFE_LOAD_ENV] = '1'
    if args.amp_dtype and not args.amp:
        raise ConfigError('--amp-dtype goes with --amp')
    if args.amp:
        if args.amp_dtype == 'float16' and not torch.cuda.is_available():
            raise ConfigError('--amp-dtype float16 needs a GPU; on a CPU --amp trains in bfloat16')
        cfg.optim_wrapper.type = 'mmvitreg.AutocastOptimWrapper'
        cfg.optim_wrapper.dtype = args.amp_dtype
    elif cfg.optim_wrapper.get('type') == 'AmpOptimWrapper' and not torch.cuda.is_available():
        # configs written for GPUs (e.g. mmdet's ConvNeXt cascade) ask for AMP; on a CPU run in fp32
        print_log(
            'no GPU: training in fp32 instead of the config\'s AmpOptimWrapper', logger='current', level=logging.WARNING
        )
        cfg.optim_wrapper.type = 'OptimWrapper'
        cfg.optim_wrapper.pop('loss_scale', None)
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg:
            raise ConfigError(f'{args.config} has no auto_scale_lr.base_batch_size; --auto-scale-lr needs it')
        cfg.auto_scale_lr.enable = True
    if args.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    check_data(cfg, ('train', 'val'))
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        if is_local(args.resume) and not osp.isfile(args.resume):
            raise ConfigError(f'--resume: checkpoint not found: {args.resume}')
        cfg.resume, cfg.load_from = True, args.resume
    return cfg


def init_cfg_keys(node, message: str, key: str = '') -> list:
    """The config keys (``model.backbone.init_cfg``) of the ``init_cfg`` whose checkpoint ``message`` names."""
    if isinstance(node, (list, tuple)):
        return [k for i, item in enumerate(node) for k in init_cfg_keys(item, message, f'{key}.{i}')]
    if not isinstance(node, dict):
        return []
    found = []
    for name, value in node.items():
        where = f'{key}.{name}' if key else name
        checkpoint = value.get('checkpoint') if name == 'init_cfg' and isinstance(value, dict) else None
        if isinstance(checkpoint, str) and any(f'checkpoint {checkpoint}{end}' in message for end in ': '):
            found.append(where)
        else:
            found += init_cfg_keys(value, message, where)
    return found


def stop(cfg, error: Exception):
    """Exit with the one ``error:`` line of ``error`` (the run's log file gets it too). A checkpoint of an
    ``init_cfg`` that cannot be read (offline, a missing file) gets the keys that replace or drop it."""
    # from a DataLoader worker the error comes as the worker's traceback, whose last line is the error's own
    message = str(error).strip().splitlines()[-1].split(f'{type(error).__name__}: ', 1)[-1]
    for key in init_cfg_keys({'model': cfg.model}, message):
        message += f': --cfg-options {key}.checkpoint=<local file>, or {key}=None to start from random weights'
    logger = MMLogger.get_current_instance()
    record = logger.makeRecord(
        logger.name, logging.ERROR, __file__, sys._getframe().f_lineno, f'error: {message}', None, None, func='stop'
    )
    for handler in logger.handlers:  # the file only: the console gets the exit line
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    sys.exit(f'error: {message}')


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = build_train_config(args)
        runner = build_runner(cfg)
    except ConfigError as e:
        sys.exit(f'error: {e}')
    try:
        runner.train()
    except (CheckpointError, LabelMapError, NonFiniteLossError) as e:
        stop(cfg, e)


if __name__ == '__main__':
    main()
