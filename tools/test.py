"""Evaluate a checkpoint with an mmpretrain, mmseg or mmdet config.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out results.pkl] [--show-dir DIR]
                                           [--tta] [--allow-partial] [--cfg-options k=v ...] [--launcher pytorch]

The checkpoint is loaded strictly: a missing, unexpected or size-mismatched key stops the run with
the file's name and the first keys of each kind (``--allow-partial`` evaluates the keys that fit).

``--tta`` runs the config's ``tta_model`` over its ``tta_pipeline`` (mmseg: multi-scale + flip from
the dataset config); an mmpretrain config without them gets mmpretrain's flip-averaging TTA.
The final metrics are printed as one JSON line prefixed with ``metrics:``.
"""
import argparse
import json
import os.path as osp
import sys

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.datasets.data_checks import check_data
from mmvitreg.engine import CheckpointError
from mmvitreg.utils import ConfigError, build_runner, load_config, parse_tool_args, set_run_args

# how each library's visualisation hook is switched on for --show-dir
_SHOW = {
    'mmpretrain': lambda cfg, d: cfg.default_hooks.visualization.update(enable=True, out_dir=d),
    'mmseg': lambda cfg, d: (cfg.default_hooks.visualization.update(draw=True, interval=1),
                             cfg.visualizer.update(save_dir=d)),
    'mmdet': lambda cfg, d: cfg.default_hooks.visualization.update(draw=True, test_out_dir=d),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test a model (mmpretrain / mmseg / mmdet config)')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the dir to save logs')
    parser.add_argument('--out', help='dump the predictions to this pickle file')
    parser.add_argument('--show-dir', help='save painted predictions to this directory')
    parser.add_argument('--tta', action='store_true', help='test-time augmentation')
    parser.add_argument('--allow-partial', action='store_true',
                        help='evaluate even if the checkpoint\'s keys do not all fit the model')
    return parse_tool_args(parser, argv)


def _mmpretrain_default_tta(cfg):
    """mmpretrain's own default: average the scores of the image and its horizontal flip."""
    cfg.setdefault('tta_model', dict(type='mmpretrain.AverageClsScoreTTA'))
    if 'tta_pipeline' not in cfg:
        test_pipeline = cfg.test_dataloader.dataset.pipeline
        cfg.tta_pipeline = [*test_pipeline[:-1], dict(type='TestTimeAug', transforms=[
            [dict(type='RandomFlip', prob=1.), dict(type='RandomFlip', prob=0.)], [test_pipeline[-1]]])]


def build_test_config(args):
    cfg = load_config(args.config, args.cfg_options)
    if not osp.isfile(args.checkpoint):
        raise ConfigError(f'checkpoint not found: {args.checkpoint}')
    scope = cfg.default_scope
    set_run_args(cfg, args)
    check_data(cfg, ('test', ))
    cfg.load_from = args.checkpoint
    cfg.setdefault('runner_type', 'mmvitreg.GuardedRunner')
    cfg.checkpoint_policy = dict(load_from='partial' if args.allow_partial else 'strict')
    if args.show_dir:
        _SHOW[scope](cfg, args.show_dir)
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
    if args.out:
        from mmengine.evaluator import DumpResults
        runner.test_evaluator.metrics.append(DumpResults(out_file_path=args.out))
    try:
        metrics = runner.test()
    except CheckpointError as e:
        sys.exit(f'error: {e}')
    if runner.rank == 0:
        print('metrics: ' + json.dumps({k: v if isinstance(v, str) else float(v) for k, v in metrics.items()}))


if __name__ == '__main__':
    main()
