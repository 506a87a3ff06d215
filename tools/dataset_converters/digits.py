"""Build the bundled handwritten-digits data sets in the ImageNet, ADE20K, Cityscapes and COCO layouts.

    python tools/dataset_converters/digits.py {imagenet,ade20k,cityscapes,coco,all} [--out data/]
        [--seed 0] [--num-train N] [--num-val M] [--size S | --size H W] [--force]

Each set goes to ``<out>/digits_<layout>`` (the ``data_root`` of ``configs/_base_/datasets/digits_*.py``).
A set already complete with the same parameters is skipped; ``--force`` rebuilds it. The sets are
made from scikit-learn's bundled digit scans (no download); see :mod:`mmvitreg.datasets.digits`.
"""
import argparse
import os.path as osp
import sys

from mmvitreg.datasets.digits import BUILDERS


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Build the digits data sets (scikit-learn scans) in the '
                                     'ImageNet, ADE20K, Cityscapes and COCO layouts')
    parser.add_argument('layout', choices=[*BUILDERS, 'all'], help='which set to build')
    parser.add_argument('--out', default='data', help='parent directory of digits_<layout>/ (default: data)')
    parser.add_argument('--seed', type=int, default=0, help='seed of the split and of the canvases')
    parser.add_argument('--num-train', type=int, help='training images (default: 1500 imagenet, 200 others)')
    parser.add_argument('--num-val', type=int, help='validation images (default: 297 imagenet, 50 others)')
    parser.add_argument('--size', type=int, nargs='+', metavar='PIXELS',
                        help='image side (imagenet, default 32) or canvas H [W] (default 128 128 for ade20k '
                        'and coco, 128 256 for cityscapes); only with a single layout')
    parser.add_argument('--force', action='store_true', help='rebuild sets that are already complete')
    args = parser.parse_args(argv)
    if args.size is not None:
        if args.layout == 'all':
            parser.error('--size differs between layouts: give it with a single layout')
        if len(args.size) > (1 if args.layout == 'imagenet' else 2):
            parser.error(f'--size takes {"one value" if args.layout == "imagenet" else "one or two values"} '
                         f'for {args.layout}, got {args.size}')
    return args


def main(argv=None):
    args = parse_args(argv)
    options = dict(seed=args.seed, force=args.force)
    if args.num_train is not None:
        options['num_train'] = args.num_train
    if args.num_val is not None:
        options['num_val'] = args.num_val
    if args.size is not None:
        options['size'] = args.size[0] if args.layout == 'imagenet' else (args.size * 2)[:2]
    for layout in BUILDERS if args.layout == 'all' else [args.layout]:
        out_dir = osp.join(args.out, f'digits_{layout}')
        try:
            summary = BUILDERS[layout](out_dir, **options)
        except (ValueError, FileExistsError) as error:
            sys.exit(f'{layout}: {error}')
        counts = ', '.join(f'{split} {n}' for split, n in summary['images'].items()) + ' images'
        if 'instances' in summary:
            counts += '; digits ' + ', '.join(f'{s} {n}' for s, n in summary['instances'].items())
        state = 'complete, skipped' if summary['skipped'] else 'wrote'
        print(f'{layout}: {state} {out_dir} ({counts}; {len(summary["classes"])} classes; '
              f'seed {summary["params"]["seed"]})')


if __name__ == '__main__':
    main()
