"""Train an mmpretrain, mmseg or mmdet config (mmvitreg components or not).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp] [--auto-scale-lr]
                                 [--no-validate] [--cfg-options k=v ...] [--launcher pytorch]

The library is picked from the config's ``default_scope``; the stack workarounds of
``mmvitreg.compat`` are applied first. Distributed: ``bash tools/dist_train.sh CONFIG N``.
"""
import argparse
import logging
import os.path as osp
import sys

import torch
from mmengine.logging import print_log

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.utils import ConfigError, build_runner, load_config, parse_tool_args, set_run_args


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model (mmpretrain / mmseg / mmdet config)')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and checkpoints')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from this checkpoint, or from the latest one in the work dir if none is given')
    parser.add_argument('--amp', action='store_true', help='automatic mixed precision (needs a GPU)')
    parser.add_argument('--auto-scale-lr', action='store_true', help='scale the lr by the real batch size')
    parser.add_argument('--no-validate', action='store_true', help='do not evaluate during training')
    return parse_tool_args(parser, argv)


def build_train_config(args):
    cfg = load_config(args.config, args.cfg_options)
    set_run_args(cfg, args)
    if args.amp:
        if not torch.cuda.is_available():
            raise ConfigError('--amp needs a GPU: mmengine\'s AmpOptimWrapper only runs on CUDA/NPU/MLU')
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    elif cfg.optim_wrapper.get('type') == 'AmpOptimWrapper' and not torch.cuda.is_available():
        # configs written for GPUs (e.g. mmdet's ConvNeXt cascade) ask for AMP; on a CPU run in fp32
        print_log('no GPU: training in fp32 instead of the config\'s AmpOptimWrapper', logger='current',
                  level=logging.WARNING)
        cfg.optim_wrapper.type = 'OptimWrapper'
        cfg.optim_wrapper.pop('loss_scale', None)
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg:
            raise ConfigError(f'{args.config} has no auto_scale_lr.base_batch_size; --auto-scale-lr needs it')
        cfg.auto_scale_lr.enable = True
    if args.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        if not osp.isfile(args.resume):
            raise ConfigError(f'--resume: checkpoint not found: {args.resume}')
        cfg.resume, cfg.load_from = True, args.resume
    return cfg


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = build_train_config(args)
    except ConfigError as e:
        sys.exit(f'error: {e}')
    build_runner(cfg).train()


if __name__ == '__main__':
    main()
