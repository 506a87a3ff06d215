"""Evaluate a checkpoint with an mmpretrain, mmseg or mmdet config.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE [--out-item {pred,metrics}]] [--amp]
                                           [--show-dir DIR] [--show] [--interval N] [--wait-time S]
                                           [--tta] [--allow-partial] [--unsafe-load] [--no-pin-memory]
                                           [--cfg-options k=v ...] [--launcher pytorch]

The flags mean what they mean in mmpretrain 1.2.0's ``tools/test.py``, for mmseg and mmdet configs too:
``--out`` dumps the predictions (``--out-item pred``, the default) or the metrics (``--out-item
metrics``; the format follows the extension: .pkl, .json, .yaml); ``--amp`` tests under autocast
(float16 on CUDA, bfloat16 on a CPU); ``--show-dir`` saves and ``--show`` displays the painted
predictions of every ``--interval``-th test image (default 1: every image), each shown for
``--wait-time`` seconds.

The checkpoint is loaded strictly: a missing, unexpected or size-mismatched key stops the run with
the file's name and the first keys of each kind (``--allow-partial`` evaluates the keys that fit). An
official release (LV-ViT, DeepViT, DiversePatch, timm DeiT / TL-Align, Swin; raw or wrapped) is
converted on load, with one log line naming its layout; an EMA recipe's copy is filled by its hook
(mmengine's, mmpretrain's or a subclass's rule: the score is mmengine's Runner's; under ``--tta`` too) and checked
against the file: a copy that loaded nothing stops the run even with ``--allow-partial``. A checkpoint whose weights
hold NaN or infinity stops the run with one line naming the first such tensor (no flag scores it).
A config error a component raises while the runner builds it is one ``error:`` line. A remote checkpoint
(``https://``, ``s3://``, ...) is fetched through mmengine's file backends. It is unpickled with
``weights_only=True`` and an allow-list of what checkpoints hold (:func:`mmvitreg.fileio.load_checkpoint`);
``--unsafe-load`` unpickles anything, for trusted files only.

``--tta`` runs the config's ``tta_model`` over its ``tta_pipeline`` (mmseg: multi-scale + flip from
the dataset config); an mmpretrain config without them gets mmpretrain's flip-averaging TTA.
The final metrics are printed as one JSON line prefixed with ``metrics:``.
"""

import argparse
import json
import logging
import os
import sys

import torch
from mmengine.logging import print_log

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.engine import CheckpointError
from mmvitreg.engine.checkpoint import is_local
from mmvitreg.fileio import UNSAFE_LOAD_ENV, UNSAFE_LOAD_HELP, open_checkpoint
from mmvitreg.utils import ConfigError, build_runner, check_data, load_config, parse_tool_args, set_run_args

# the file types --out can write: mmengine's DumpResults pickles predictions, mmengine.dump the metrics
_OUT_FORMATS = {'pred': ('.pkl', '.pickle'), 'metrics': ('.json', '.yaml', '.yml', '.pkl', '.pickle')}


def set_visualization(cfg, args):
    """Switch the library's visualisation hook on for ``--show-dir`` / ``--show``: each library names the
    switch and the output folder its own way (mmpretrain ``enable`` / ``out_dir``, mmseg ``draw`` / the
    visualizer's ``save_dir``, mmdet ``draw`` / ``test_out_dir``)."""
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise ConfigError(f'{args.config} has no default_hooks.visualization, which --show / --show-dir need')
    hook.update(interval=args.interval, show=args.show, wait_time=args.wait_time)
    if cfg.default_scope == 'mmpretrain':
        hook.update(enable=True, out_dir=args.show_dir)
        return
    hook.draw = True
    if args.show_dir and cfg.default_scope == 'mmseg':
        cfg.visualizer.save_dir = args.show_dir
    elif args.show_dir:
        hook.test_out_dir = args.show_dir


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test a model (mmpretrain / mmseg / mmdet config)')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file (a local path, or a URL an mmengine file backend reads)')
    parser.add_argument('--work-dir', help='the dir to save logs')
    parser.add_argument('--out', help='dump the predictions (or with --out-item metrics, the metrics) to this file')
    parser.add_argument(
        '--out-item', choices=['pred', 'metrics'], help='what --out holds: the predictions (default) or the metrics'
    )
    parser.add_argument('--amp', action='store_true', help='test under autocast: float16 on CUDA, bfloat16 on a CPU')
    parser.add_argument('--show-dir', help='save painted predictions to this directory')
    parser.add_argument('--show', action='store_true', help='display painted predictions in a window')
    parser.add_argument(
        '--interval',
        type=int,
        default=1,
        help='paint every N-th test image for --show / --show-dir (default 1: every image)',
    )
    parser.add_argument('--wait-time', type=float, default=2, help='seconds each --show window stays (default 2)')
    parser.add_argument('--no-pin-memory', action='store_true', help='switch pin_memory off in the dataloader')
    parser.add_argument('--tta', action='store_true', help='test-time augmentation')
    parser.add_argument(
        '--allow-partial', action='store_true', help='evaluate even if the checkpoint\'s keys do not all fit the model'
    )
    parser.add_argument('--unsafe-load', action='store_true', help=UNSAFE_LOAD_HELP)
    return parse_tool_args(parser, argv)


def _mmpretrain_default_tta(cfg):
    """mmpretrain's own default: average the scores of the image and its horizontal flip."""
    cfg.setdefault('tta_model', dict(type='mmpretrain.AverageClsScoreTTA'))
    if 'tta_pipeline' not in cfg:
        test_pipeline = cfg.test_dataloader.dataset.pipeline
        cfg.tta_pipeline = [
            *test_pipeline[:-1],
            dict(
                type='TestTimeAug',
                transforms=[
                    [dict(type='RandomFlip', prob=1.0), dict(type='RandomFlip', prob=0.0)],
                    [test_pipeline[-1]],
                ],
            ),
        ]


def build_test_config(args):
    cfg = load_config(args.config, args.cfg_options)
    if is_local(args.checkpoint):  # the loader's own gate, run before the runner writes its work dir
        open_checkpoint(args.checkpoint, args.checkpoint, ConfigError).close()
    if args.out_item and not args.out:
        raise ConfigError('--out-item says what --out holds: give --out FILE too')
    if args.out:
        formats = _OUT_FORMATS[args.out_item or 'pred']
        if not args.out.endswith(formats):
            raise ConfigError(f'--out {args.out}: {args.out_item or "pred"} is written as {" / ".join(formats)}')
    if args.interval < 1:
        raise ConfigError(f'--interval must be at least 1, not {args.interval}')
    scope = cfg.default_scope
    set_run_args(cfg, args)
    check_data(cfg, ('test',))
    cfg.load_from = args.checkpoint
    cfg.setdefault('runner_type', 'mmvitreg.GuardedRunner')
    cfg.checkpoint_policy = dict(load_from='partial' if args.allow_partial else 'strict')
    if args.unsafe_load:
        os.environ[UNSAFE_LOAD_ENV] = '1'
    if args.show_dir or args.show:
        set_visualization(cfg, args)
    if args.amp:
        cfg.test_cfg.fp16 = True
        if not torch.cuda.is_available():
            print_log('--amp without a GPU: testing under bfloat16 autocast', logger='current', level=logging.WARNING)
    if args.tta:
        if scope == 'mmpretrain':
            _mmpretrain_default_tta(cfg)
        if 'tta_model' not in cfg or 'tta_pipeline' not in cfg:
            raise ConfigError(f'{args.config} defines no tta_model / tta_pipeline, which --tta needs')
        cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline
        cfg.tta_model.module = cfg.model
        cfg.model = cfg.tta_model
    return cfg


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = build_test_config(args)
        runner = build_runner(cfg)
    except ConfigError as e:
        sys.exit(f'error: {e}')
    if args.out and args.out_item != 'metrics':
        from mmengine.evaluator import DumpResults

        runner.test_evaluator.metrics.append(DumpResults(out_file_path=args.out))
    try:
        metrics = runner.test()
    except CheckpointError as e:
        sys.exit(f'error: {e}')
    if runner.rank == 0:
        if args.out_item == 'metrics':
            import mmengine

            mmengine.dump(metrics, args.out)
        print('metrics: ' + json.dumps({k: v if isinstance(v, str) else float(v) for k, v in metrics.items()}))


if __name__ == '__main__':
    main()
