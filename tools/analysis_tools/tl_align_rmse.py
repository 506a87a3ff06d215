"""RMSE between the plain CutMix target and the TL-Align target over a data set (TL-Align paper Fig. 3).

    python tools/analysis_tools/tl_align_rmse.py --model NAME CONFIG [CHECKPOINT] [--model ...]
        [--split val] [--num-images 512] [--batch-size 32] [--seed 0] [--device cpu] [--out CSV]
        [--cfg-options k=v ...]

For each model (an mmpretrain config of a ``mmvitreg.TokenClassifier`` with ``train_cfg.mix``,
and its checkpoint; without one, the config's initialisation), the config's ``<split>_dataloader``
images are mixed by the model's own plan (the same draws for every model: numpy and torch are seeded
with ``--seed`` before each model) and TL-Align's labels are carried through its backbone (eval mode,
no drop path). ``lam`` is the own share of the area target, ``w`` that of the aligned target (the
model's own ``TLAlign``, else one over all its blocks); the two targets differ by ``+-(w - lam)`` in the
two mixed classes. Shows a progress bar per model, prints a table and writes a CSV (one row per model:
images, RMSE, mean |w - lam|, mean lam, mean w) and a PNG beside it (the RMSE and mean |w - lam| of every
model, as the paper's Fig. 3). ``--cfg-options`` apply to every config.
"""

import argparse
import csv
import os
import os.path as osp
import sys

import numpy as np
import torch
from mmengine.config import DictAction
from studies.tl_align_diagnostics import alignment_rmse

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.engine.checkpoint import CheckpointError
from mmvitreg.utils import ConfigError, build_dataloader, build_model, load_config

FIELDS = ('model', 'config', 'checkpoint', 'images', 'rmse', 'mean_abs_diff', 'mean_lam', 'mean_aligned')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='TL-Align Fig. 3: RMSE between the CutMix and the aligned target')
    parser.add_argument(
        '--model',
        nargs='+',
        action='append',
        required=True,
        metavar='NAME CONFIG [CHECKPOINT]',
        help='a model to measure (repeat the option for several)',
    )
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='use a checkpoint whose keys do not all fit the model (the keys that fit are loaded)',
    )
    parser.add_argument(
        '--split',
        choices=['train', 'val', 'test'],
        default='val',
        help='which dataloader of the config to read (its pipeline, unshuffled)',
    )
    parser.add_argument('--num-images', type=int, default=512)
    parser.add_argument('--batch-size', type=int, default=32, help='images per mixed batch')
    parser.add_argument('--num-workers', type=int, default=2)
    parser.add_argument('--seed', type=int, default=0, help='seed of the mixing draws (the same for every model)')
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument(
        '--out', default=osp.join('work_dirs', 'tl_align_rmse.csv'), help='CSV to write (the plot goes beside it, .png)'
    )
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override settings of every config')
    args = parser.parse_args(argv)
    for spec in args.model:
        if len(spec) not in (2, 3):
            parser.error(f'--model takes NAME CONFIG [CHECKPOINT], got {spec}')
    if args.num_images < 1 or args.batch_size < 2:
        parser.error('--num-images must be positive and --batch-size at least 2 (images are mixed in pairs)')
    return args


def measure(spec, args) -> dict:
    from mmengine.registry import DefaultScope

    name, config, checkpoint = (list(spec) + [None])[:3]
    cfg = load_config(config, args.cfg_options)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = build_model(cfg, checkpoint, args.device, args.allow_partial)
        loader = build_dataloader(cfg, args.split, args.batch_size, args.num_workers)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        print(f'{name}: {args.num_images} {args.split} images')
        res = alignment_rmse(model, loader, args.num_images, args.split)
    return dict(
        model=name,
        config=config,
        checkpoint=checkpoint or 'untrained',
        images=res.num_images,
        rmse=res.rmse,
        mean_abs_diff=res.mean_abs,
        mean_lam=res.mean_lam,
        mean_aligned=res.mean_aligned,
    )


def plot(path, rows, split):
    """Bars of the RMSE and the mean |w - lam| of every model."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(rows) + 2), 3.6))
    for shift, key, label in ((-0.2, 'rmse', 'RMSE'), (0.2, 'mean_abs_diff', 'mean |w - lam|')):
        bars = ax.bar(x + shift, [r[key] for r in rows], width=0.4, label=label)
        ax.bar_label(bars, fmt='%.3g', fontsize=8)
    ax.set_xticks(x, [r['model'] for r in rows])
    ax.set_ylabel('aligned vs CutMix target (own share)')
    ax.set_title(
        f'TL-Align: the area (CutMix) vs the aligned target\n{rows[0]["images"]} {split} images per model', fontsize=9
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    rows = []
    for spec in args.model:
        try:
            rows.append(measure(spec, args))
        except (ConfigError, CheckpointError, TypeError, ValueError) as e:
            sys.exit(f'error: {spec[0]}: {e}')
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w', newline='') as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    width = max(len(r['model']) for r in rows)
    print(f'{"model":<{width}}  images    RMSE  mean|w-lam|  mean lam  mean w')
    for r in rows:
        print(
            f'{r["model"]:<{width}}  {r["images"]:6d}  {r["rmse"]:.4f}  {r["mean_abs_diff"]:11.4f}  '
            f'{r["mean_lam"]:8.4f}  {r["mean_aligned"]:.4f}'
        )
    png = osp.splitext(args.out)[0] + '.png'
    plot(png, rows, args.split)
    print(f'wrote {args.out} and {png}')


if __name__ == '__main__':
    main()
