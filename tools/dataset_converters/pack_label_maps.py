"""Pack a folder of token-labeling label maps into one memory-mapped store.

    python tools/dataset_converters/pack_label_maps.py LABEL_ROOT STORE [--num-classes K]

``LABEL_ROOT`` holds one ``.npy`` or ``.pt`` map per image (``tools/generate_label_maps.py`` or the official
NFNet-F6 maps, e.g. ``data/imagenet/label_top5_train_nfnet``); ``STORE`` is the folder to create
(e.g. ``data/imagenet/label_top5_train_nfnet_packed``). Point ``LoadTokenLabelMap``'s ``label_root``
at the store: it holds the same maps under the same names and loads each 3-4x faster
(:mod:`mmvitreg.datasets.label_map_store`). Every map is validated while packing; the first malformed
one stops the run with its file name. The official 1.28M ImageNet maps make a store of about 8.3 GB.
"""

import argparse
import sys

from mmvitreg.datasets.label_map_store import pack_label_maps


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Pack a folder of label maps into a memory-mapped store')
    parser.add_argument('label_root', help='folder of .npy / .pt label maps')
    parser.add_argument('store', help='store folder to create (must not exist)')
    parser.add_argument('--num-classes', type=int, help='check that every class index is below it')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        meta = pack_label_maps(args.label_root, args.store, args.num_classes)
    except (OSError, ValueError) as e:
        sys.exit(f'error: {e}')
    print(
        f'\npacked {meta["count"]} label maps of {tuple(meta["map_shape"])} {meta["dtype"]} '
        f'(largest class index {meta["max_class"]}) into {args.store}'
    )


if __name__ == '__main__':
    main()
