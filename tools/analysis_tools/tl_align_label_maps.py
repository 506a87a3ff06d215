"""The mixed image, its initial and its aligned token label maps after chosen blocks (TL-Align paper Fig. 5).

    python tools/analysis_tools/tl_align_label_maps.py CONFIG [--checkpoint CKPT] [--layers -1 ...]
        [--split val] [--num-images 4] [--seed 0] [--device cpu] [--out PNG] [--cfg-options k=v ...]

Takes ``--num-images`` images of the config's ``<split>_dataloader`` (a ``mmvitreg.TokenClassifier``
with ``train_cfg.mix``), mixes them with the model's plan (seeded by ``--seed``), carries TL-Align's
labels through the backbone (eval mode) and draws per image: the mixed image, the initial label map
(each token's own share) and the aligned map after each block of ``--layers`` (numbered from 0,
negative from the last; printed from 1 as in the paper); red = own label, blue = the partner's.
"""

import argparse
import os
import os.path as osp
import sys

import numpy as np
import torch
from mmengine.config import DictAction
from studies.tl_align_diagnostics import align_batch, draw_label_maps, label_maps, tl_align_of

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.engine.checkpoint import CheckpointError
from mmvitreg.utils import ConfigError, build_dataloader, build_model, load_config


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='TL-Align Fig. 5: initial and aligned token label maps')
    parser.add_argument('config')
    parser.add_argument('--checkpoint', help='checkpoint to load (default: untrained weights)')
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='use a checkpoint whose keys do not all fit the model (the keys that fit are loaded)',
    )
    parser.add_argument('--layers', type=int, nargs='+', default=[-1], help='blocks after which to draw the labels')
    parser.add_argument('--split', choices=['train', 'val', 'test'], default='val')
    parser.add_argument('--num-images', type=int, default=4, help='images to draw (at least 2: they are mixed)')
    parser.add_argument('--seed', type=int, default=0, help='seed of the mixing draw')
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--out', help='PNG to write (default: work_dirs/tl_align_label_maps/<config name>.png)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override settings of the config')
    args = parser.parse_args(argv)
    if args.num_images < 2:
        parser.error('--num-images must be at least 2 (images are mixed in pairs)')
    return args


def main(argv=None):
    args = parse_args(argv)
    from mmengine.registry import DefaultScope

    try:
        cfg = load_config(args.config, args.cfg_options)
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            model = build_model(cfg, args.checkpoint, args.device, args.allow_partial)
            batch = next(iter(build_dataloader(cfg, args.split, args.num_images, 0)))
            tl = tl_align_of(model)
            np.random.seed(args.seed)
            torch.manual_seed(args.seed)
            inputs, plan, trace = align_batch(model, batch, tl)
            maps = label_maps(trace, args.layers)
    except (ConfigError, CheckpointError, TypeError, ValueError, IndexError) as e:
        sys.exit(f'error: {e}')
    dp = model.data_preprocessor
    images = inputs * dp.std + dp.mean if getattr(dp, '_enable_normalize', False) else inputs
    images = images if getattr(dp, '_channel_conversion', False) else images[:, [2, 1, 0]]  # BGR files -> RGB
    name = osp.splitext(osp.basename(args.config))[0]
    out = args.out or osp.join('work_dirs', 'tl_align_label_maps', name + '.png')
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    weights = osp.basename(args.checkpoint) if args.checkpoint else 'untrained'
    draw_label_maps(out, images / 255.0, plan.mask, maps, plan.lam, tl.aligned_weights(trace), f'{name} ({weights})')
    for b, (lam, w) in enumerate(zip(plan.lam.tolist(), tl.aligned_weights(trace).tolist())):
        print(f'image {b}: area lam {lam:.4f}  aligned {w:.4f}')
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
