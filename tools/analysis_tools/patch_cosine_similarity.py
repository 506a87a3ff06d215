"""Patch-wise absolute cosine similarity per layer (DiversePatch §3, Figures 1b and 3).

    python tools/analysis_tools/patch_cosine_similarity.py CONFIG [--checkpoints CKPT ...] [--labels NAME ...]
        [--split val] [--num-images 256] [--batch-size 32] [--device cpu] [--out PREFIX] [--cfg-options k=v ...]

Builds the model of an mmpretrain config (or of an mmseg / mmdet one: the backbone of a segmentor or a detector,
on its test pipeline's images) once per checkpoint (no checkpoint: the config's untrained
initialisation), runs ``--num-images`` images of the config's ``<split>_dataloader`` (its pipeline as
configured: the test pipeline for val/test, no augmentation) through the backbone and averages the
patch-wise absolute cosine similarity ``P(h)`` of every layer (:mod:`studies.patch_similarity`:
ViT blocks, Swin stage inputs, ResNet stages), with a progress bar per checkpoint. Writes ``PREFIX.csv``
(label, layer, name, similarity) and ``PREFIX.png`` (one line per checkpoint over the layers, as the paper's
Figures 1b and 3).
"""

import argparse
import csv
import os
import os.path as osp
import sys

import torch
from mmengine.config import DictAction
from studies.patch_similarity import patch_cosine_per_layer

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.engine.checkpoint import CheckpointError
from mmvitreg.utils import ConfigError, build_dataloader, build_model, first_images, load_config


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='DiversePatch §3: patch-wise absolute cosine similarity per layer')
    parser.add_argument(
        'config', help='config of a classifier, segmentor or detector with a ViT-family, Swin or ResNet backbone'
    )
    parser.add_argument('--checkpoints', nargs='+', default=[None], help='checkpoints (default: untrained weights)')
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='use a checkpoint whose keys do not all fit the model (the keys that fit are loaded)',
    )
    parser.add_argument('--labels', nargs='+', help='a name per checkpoint for the plot (default: file names)')
    parser.add_argument('--split', choices=['train', 'val', 'test'], default='val', help='dataloader of the config')
    parser.add_argument('--num-images', type=int, default=256, help='images to average over')
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument(
        '--out', help='output prefix of the .csv and .png (default: work_dirs/patch_cosine_similarity/<config name>)'
    )
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override settings of the config')
    args = parser.parse_args(argv)
    if args.num_images < 1 or args.batch_size < 1:
        parser.error('--num-images and --batch-size must be positive')
    if args.labels and len(args.labels) != len(args.checkpoints):
        parser.error(f'{len(args.labels)} labels for {len(args.checkpoints)} checkpoints')
    return args


def inputs_of(model, loader, num_images, split, device):
    """Preprocessed inputs ``(B, 3, H, W)`` of the first ``num_images`` images of the split, in order, with a
    progress bar."""
    for batch, take in first_images(loader, num_images, split):
        yield model.data_preprocessor(batch, False)['inputs'][:take].to(device)


def plot(path, results, title):
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, names, values in results:
        ax.plot(range(1, len(values) + 1), values, marker='o', label=label)
    names = results[0][1]
    ax.set_xticks(range(1, len(names) + 1), names, rotation=45 if len(names) > 6 else 0, ha='right')
    ax.set_ylabel('patch-wise absolute cosine similarity')
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend()
    fig.savefig(path, dpi=110, bbox_inches='tight')
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
        from mmengine.registry import init_default_scope

        init_default_scope(cfg.default_scope)
        loader = build_dataloader(cfg, args.split, args.batch_size, num_workers=0)
    except ConfigError as e:
        sys.exit(f'error: {e}')
    labels = args.labels or [osp.basename(c) if c else 'untrained' for c in args.checkpoints]
    results = []
    for label, ckpt in zip(labels, args.checkpoints):
        print(f'{label}: {args.num_images} {args.split} images')
        try:
            model = build_model(cfg, ckpt, args.device, args.allow_partial)
        except CheckpointError as e:
            sys.exit(f'error: {e}')
        names, values = patch_cosine_per_layer(
            model.backbone, inputs_of(model, loader, args.num_images, args.split, args.device)
        )
        results.append((label, names, values))
        print(f'{label}: ' + ', '.join(f'{n} {v:.3f}' for n, v in zip(names, values)))
    out = args.out or osp.join('work_dirs', 'patch_cosine_similarity', osp.splitext(osp.basename(args.config))[0])
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    with open(out + '.csv', 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['label', 'layer', 'name', 'patch_cosine_similarity'])
        for label, names, values in results:
            writer.writerows([label, i + 1, n, f'{v:.6f}'] for i, (n, v) in enumerate(zip(names, values)))
    plot(out + '.png', results, osp.basename(args.config))
    print(f'wrote {out}.csv and {out}.png')


if __name__ == '__main__':
    sys.exit(main())
