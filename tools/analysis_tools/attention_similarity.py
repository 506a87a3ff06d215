"""Cross-layer attention-map similarity of a ViT-family backbone (DeepViT Eq. 2, Fig. 3, Table 4).

    python tools/analysis_tools/attention_similarity.py CONFIG [--checkpoint CKPT]
        [--split val] [--num-images 256] [--batch-size 8] [--device cpu] [--out PREFIX]
        [--neighbours 1] [--vector-threshold TAU] [--ratio-threshold 0.9] [--cfg-options k=v ...]

Builds the model of an mmpretrain (or mmseg) config, loads the checkpoint if given (else the
config's initialisation: an untrained model), runs ``--num-images`` images of the config's
``<split>_dataloader`` through its backbone with a :class:`~mmvitreg.models.trace.TokenTrace` asking
for the attention maps of every block, and accumulates Eq. 2 over them
(:class:`studies.attention_similarity.AttentionSimilarity`; see there for the definition of similar blocks).

Writes ``PREFIX.png`` (the block x block similarity matrix and the adjacent-block similarity ratio
with the similar blocks marked, as the paper's Fig. 3/4) and ``PREFIX.csv`` (one row per block:
adjacent similarity, similarity ratio, whether it is a similar block, and its matrix row). Blocks
are numbered from 1 in both, as in the paper. Works for any backbone that accepts a token trace
(``mmvitreg.DeepViT``, ``mmvitreg.LVViT``).
"""

import argparse
import csv
import os
import os.path as osp
import sys

import torch
from mmengine.config import DictAction
from studies.attention_similarity import AttentionSimilarity, SimilarityResult

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.engine.checkpoint import CheckpointError
from mmvitreg.models.trace import TokenTrace
from mmvitreg.utils import ConfigError, build_dataloader, build_model, first_images, load_config


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='DeepViT Eq. 2 cross-layer attention similarity and the number of similar blocks'
    )
    parser.add_argument('config', help='config of a model with an mmvitreg ViT-family backbone')
    parser.add_argument('--checkpoint', help='checkpoint to load (default: untrained weights)')
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='use a checkpoint whose keys do not all fit the model (the keys that fit are loaded)',
    )
    parser.add_argument(
        '--split',
        choices=['train', 'val', 'test'],
        default='val',
        help='which dataloader of the config to read (its test-time pipeline for val/test)',
    )
    parser.add_argument('--num-images', type=int, default=256, help='images to average over')
    parser.add_argument(
        '--batch-size', type=int, default=8, help='images per forward pass (the maps of all blocks are held at once)'
    )
    parser.add_argument('--num-workers', type=int, default=2, help='dataloader workers')
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument(
        '--out', help='output prefix of the .png and .csv (default: work_dirs/attention_similarity/<config name>)'
    )
    parser.add_argument('--neighbours', type=int, default=1, help='blocks on each side that count as adjacent')
    parser.add_argument(
        '--vector-threshold',
        type=float,
        default=None,
        help='if given, the similarity ratio is the share of token-wise attention vectors '
        'whose similarity exceeds it; else their mean similarity',
    )
    parser.add_argument(
        '--ratio-threshold',
        type=float,
        default=0.9,
        help='a block is similar when its ratio reaches this (paper: 90%%)',
    )
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override settings of the config')
    args = parser.parse_args(argv)
    if args.num_images < 1 or args.batch_size < 1:
        parser.error('--num-images and --batch-size must be positive')
    return args


def build_traced_model(cfg, checkpoint, device, allow_partial=False):
    model = build_model(cfg, checkpoint, device, allow_partial)
    backbone = getattr(model, 'backbone', None)
    if getattr(backbone, 'trace_spec', None) is None:
        raise ConfigError(
            f'the backbone {type(backbone).__name__} does not record attention maps in a token '
            f'trace; use an mmvitreg ViT-family backbone (mmvitreg.DeepViT, mmvitreg.LVViT)'
        )
    return model


@torch.no_grad()
def measure(model, loader, num_images, acc: AttentionSimilarity, split: str = 'val') -> SimilarityResult:
    blocks = tuple(range(acc.num_blocks))
    for batch, take in first_images(loader, num_images, split):
        inputs = model.data_preprocessor(batch, False)['inputs'][:take]
        trace = TokenTrace(attn_layers=blocks)
        model.backbone(inputs, trace=trace)
        acc.update([trace.attn[i] for i in blocks])
    return acc.compute()


def write_csv(path, res: SimilarityResult):
    num_blocks = res.matrix.shape[0]
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(
            ['block', 'adjacent_similarity', 'similarity_ratio', 'similar_block']
            + [f'similarity_to_block_{q + 1}' for q in range(num_blocks)]
        )
        for p in range(num_blocks):
            writer.writerow(
                [p + 1, f'{res.adjacent[p]:.6f}', f'{res.ratio[p]:.6f}', int(res.similar[p])]
                + [f'{v:.6f}' for v in res.matrix[p].tolist()]
            )


def plot(path, res: SimilarityResult, acc: AttentionSimilarity, title: str):
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    num_blocks = res.matrix.shape[0]
    blocks = list(range(1, num_blocks + 1))
    step = max(1, round(num_blocks / 16))
    ticks = [b for b in blocks if (b - 1) % step == 0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw=dict(width_ratios=[1, 1.15]))

    low = min(0.0, float(res.matrix.min()))
    image = left.imshow(
        res.matrix.numpy(),
        cmap='viridis',
        vmin=low,
        vmax=1.0,
        origin='upper',
        extent=(0.5, num_blocks + 0.5, num_blocks + 0.5, 0.5),
    )
    fig.colorbar(image, ax=left, fraction=0.046, pad=0.04, label='mean similarity (Eq. 2)')
    left.set_xticks(ticks)
    left.set_yticks(ticks)
    left.set_xlabel('block q')
    left.set_ylabel('block p')
    left.set_title('Cross-layer attention similarity $M^{p,q}$\n(mean over images, heads and tokens)')

    ratio_name = (
        'mean similarity'
        if acc.vector_threshold is None
        else f'share of vectors with similarity > {acc.vector_threshold:g}'
    )
    right.plot(blocks, res.ratio.numpy(), '-o', color='tab:blue', ms=4, label=f'similarity ratio ({ratio_name})')
    if acc.vector_threshold is not None:
        right.plot(blocks, res.adjacent.numpy(), '--', color='tab:gray', label='mean similarity')
    similar = [b for b in blocks if res.similar[b - 1]]
    right.plot(
        similar,
        res.ratio[res.similar].numpy(),
        'o',
        color='tab:red',
        ms=8,
        mfc='none',
        mew=2,
        label=f'similar block ({len(similar)})',
    )
    right.axhline(acc.ratio_threshold, color='tab:red', ls=':', lw=1, label=f'threshold {acc.ratio_threshold:.0%}')
    right.set_xticks(ticks)
    right.set_xlim(0.5, num_blocks + 0.5)
    right.set_ylim(min(0.0, float(res.ratio.min()) - 0.05), 1.05)
    right.set_xlabel('block')
    right.set_ylabel('similarity ratio')
    side = 'neighbour' if acc.neighbours == 1 else f'{acc.neighbours} neighbours'
    right.set_title(
        f'Similarity with adjacent blocks (1 {side} each side)\n{len(similar)} of {num_blocks} blocks similar'
    )
    right.grid(alpha=0.3)
    right.legend(loc='best', fontsize=9, framealpha=0.9)

    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
        from mmengine.registry import init_default_scope

        init_default_scope(cfg.default_scope)
        model = build_traced_model(cfg, args.checkpoint, args.device, args.allow_partial)
        loader = build_dataloader(cfg, args.split, args.batch_size, args.num_workers)
    except (ConfigError, CheckpointError) as e:
        sys.exit(f'error: {e}')
    acc = AttentionSimilarity(
        len(model.backbone.layers),
        neighbours=args.neighbours,
        vector_threshold=args.vector_threshold,
        ratio_threshold=args.ratio_threshold,
    )
    res = measure(model, loader, args.num_images, acc, args.split)

    name = osp.splitext(osp.basename(args.config))[0]
    prefix = args.out or osp.join('work_dirs', 'attention_similarity', name)
    os.makedirs(osp.dirname(osp.abspath(prefix)), exist_ok=True)
    write_csv(prefix + '.csv', res)
    weights = osp.basename(args.checkpoint) if args.checkpoint else 'untrained'
    plot(prefix + '.png', res, acc, f'{name} ({weights}), {res.num_images} {args.split} images')

    print('block  adjacent-similarity  ratio  similar')
    for p in range(len(res.ratio)):
        print(f'{p + 1:5d}  {res.adjacent[p]:19.4f}  {res.ratio[p]:5.3f}  {"yes" if res.similar[p] else ""}')
    print(
        f'similar blocks: {res.num_similar_blocks} of {len(res.ratio)} '
        f'(ratio >= {args.ratio_threshold:g}); wrote {prefix}.png and {prefix}.csv'
    )


if __name__ == '__main__':
    main()
