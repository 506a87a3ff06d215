"""Data-pipeline throughput with and without token-labeling label maps, side by side.

    python tools/analysis_tools/benchmark_data_pipeline.py [--num-images 64] [--rounds 3] [--map-size 18]
        [--topk 5] [--token-label-size 14] [--reading official|topk] [--batch-size 128] [--work-dir DIR]

Runs mmpretrain's ImageNet training pipeline at 224 px (``RandomResizedCrop`` bicubic, horizontal flip,
RandAugment ``timm_increasing`` m9 std0.5, ``RandomErasing`` 0.25, as in mmpretrain's Swin/DeiT
ImageNet configs) and the same pipeline with label maps (``LoadTokenLabelMap``, the label-aware
crop/flip/RandAugment, ``TokenLabelTarget``, which only packs the map with its matrix), three times: maps
read from a packed store (``tools/dataset_converters/pack_label_maps.py``, the recommended set-up,
which the target is judged on), from one ``.npy`` file per image (what ``tools/generate_label_maps.py`` writes)
and from one ``.pt`` file per image (the official maps as downloaded, read by ``torch.load(weights_only=True)``).
The four run on the same images, interleaved sample by sample (the order rotating)
with the same random seed, so all see identical augmentations; the three label-map pipelines must
give identical token labels. Images: the bundled digit
scans upscaled to ImageNet's typical 500x375 with paper-like noise, JPEG; maps at ``--map-size``
(18: the official NFNet-F6 maps): the top-k of a smooth random teacher output over
``--classes-per-image`` of 1000 classes (neighbouring cells share most classes, as in real maps;
1000 makes every cell independent). The per-token reading of the maps is not part of the data
pipeline: ``TokenClsDataPreprocessor`` does it per batch; the tool times that reading
(``token_label_targets``, and ``relabel_targets`` for ``--reading official``, the LV-ViT recipe's) on
batches of ``--batch-size`` of the packed samples, once per batch.

Single-threaded (as one dataloader worker) and timed in CPU time (robust to other load on the machine).
Prints the time per image of the pipelines, the time of
each transform, and the overhead of the label maps against the target: label maps slow the data
pipeline by at most 5%.
"""

import argparse
import os.path as osp
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import cv2
import mmcv
import numpy as np
import torch

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.datasets.label_map_store import pack_label_maps
from mmvitreg.datasets.label_maps import label_map_path, save_label_map
from mmvitreg.datasets.token_label_target import READINGS, relabel_targets, token_label_targets

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'dataset_converters'))
from digits import load_digit_scans, upscale_scan  # noqa: E402  (the digits builders, a neighbour tool)

TARGET_OVERHEAD = 0.05
IMG_W, IMG_H = 500, 375


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Benchmark the data pipeline with vs without label maps')
    parser.add_argument('--num-images', type=int, default=64)
    parser.add_argument('--rounds', type=int, default=3, help='passes over the images')
    parser.add_argument('--map-size', type=int, default=18, help='label map side (official: 18)')
    parser.add_argument('--topk', type=int, default=5, help='classes stored per map cell (official: 5)')
    parser.add_argument('--token-label-size', type=int, default=14)
    parser.add_argument(
        '--samples-per-token', type=int, default=2, help='TokenLabelTarget sample points per token side (default: 2)'
    )
    parser.add_argument(
        '--reading',
        choices=READINGS,
        default='official',
        help="TokenLabelTarget reading (default: 'official', the LV-ViT recipe's)",
    )
    parser.add_argument('--batch-size', type=int, default=128, help='batch of the per-batch token-label reading')
    parser.add_argument(
        '--classes-per-image',
        type=int,
        default=50,
        help='classes a map draws its top-k from (1000: every cell independent, worst case)',
    )
    parser.add_argument('--work-dir', help='where to write the images and maps (default: a temporary dir)')
    return parser.parse_args(argv)


def synthetic_map(map_size, topk, pool, rng):
    """Top-k of a smooth random teacher output over ``pool`` classes (of 1000), like a real map whose
    neighbouring cells share most of their classes."""
    classes = rng.choice(1000, pool, replace=False)
    coarse = rng.normal(0.0, 3.0, (pool, 4, 4)).astype(np.float32)
    field = np.stack([cv2.resize(c, (map_size, map_size), interpolation=cv2.INTER_CUBIC) for c in coarse])
    field += rng.normal(0.0, 0.5, field.shape)
    order = np.argsort(-field, 0)[:topk]
    return torch.from_numpy(np.take_along_axis(field, order, 0)), torch.from_numpy(classes[order])


def write_data(root, num_images, map_size, topk, pool, rng):
    """ImageNet-like JPEGs under ``root/train/<class>/``, synthetic maps under ``root/labels`` (``.npy``) and
    ``root/labels_pt`` (``.pt``), and their store at ``root/labels_packed``."""
    scans, labels = load_digit_scans()
    paths = []
    for i in range(num_images):
        ink = cv2.resize(upscale_scan(scans[i], IMG_H), (IMG_W, IMG_H), interpolation=cv2.INTER_CUBIC)
        grey = 230.0 - 200.0 * ink[..., None] + rng.normal(0.0, 12.0, (IMG_H, IMG_W, 3))
        path = osp.join(root, 'train', f'digit_{labels[i]}', f'{i:05d}.JPEG')
        mmcv.imwrite(np.clip(grey, 0, 255).astype(np.uint8), path, params=[cv2.IMWRITE_JPEG_QUALITY, 90])
        label_map = synthetic_map(map_size, topk, pool, rng)
        for folder, suffix in (('labels', '.npy'), ('labels_pt', '.pt')):
            save_label_map(label_map_path(osp.join(root, folder), path, osp.join(root, 'train'), suffix), *label_map)
        paths.append(path)
    pack_label_maps(osp.join(root, 'labels'), osp.join(root, 'labels_packed'), progress=False)
    return paths


def pipelines(root, token_label_size, samples_per_token, reading):
    """``{name: transforms}``: the plain ImageNet pipeline and the same one with label maps from the
    store, the ``.npy`` files and the ``.pt`` files, built by the registry."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import TRANSFORMS

    init_default_scope('mmpretrain')
    randaug = dict(
        policies='timm_increasing',
        num_policies=2,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(pad_val=[104, 116, 124], interpolation='bicubic'),
    )
    erase = dict(
        type='RandomErasing',
        erase_prob=0.25,
        mode='rand',
        min_area_ratio=0.02,
        max_area_ratio=1 / 3,
        fill_color=[103.53, 116.28, 123.675],
        fill_std=[57.375, 57.12, 58.395],
    )
    crop = dict(scale=224, backend='pillow', interpolation='bicubic')
    plain = [
        dict(type='LoadImageFromFile'),
        dict(type='RandomResizedCrop', **crop),
        dict(type='RandomFlip', prob=0.5, direction='horizontal'),
        dict(type='RandAugment', **randaug),
        erase,
        dict(type='PackInputs'),
    ]

    def labelled(label_root):
        return [
            dict(type='LoadImageFromFile'),
            dict(type='mmvitreg.LoadTokenLabelMap', label_root=label_root, img_prefix=osp.join(root, 'train')),
            dict(type='mmvitreg.RandomResizedCropWithLabelMap', **crop),
            dict(type='mmvitreg.RandomFlipWithLabelMap', prob=0.5, direction='horizontal'),
            dict(type='mmvitreg.RandAugmentWithLabelMap', **randaug),
            erase,
            dict(
                type='mmvitreg.TokenLabelTarget',
                token_label_size=token_label_size,
                samples_per_token=samples_per_token,
                reading=reading,
                num_classes=1000,
            ),
            dict(type='PackInputs', algorithm_keys=['token_label_map']),
        ]

    cfgs = {
        'without label maps': plain,
        'label maps, packed store': labelled(osp.join(root, 'labels_packed')),
        'label maps, .npy files': labelled(osp.join(root, 'labels')),
        'label maps, .pt files': labelled(osp.join(root, 'labels_pt')),
    }
    return {name: [TRANSFORMS.build(t) for t in cfg] for name, cfg in cfgs.items()}


def run(transforms, path, seed, times):
    """One sample through ``transforms``; adds each transform's seconds to ``times``."""
    np.random.seed(seed)
    results = dict(img_path=path)
    for t in transforms:
        start = time.process_time()
        results = t(results)
        times[type(t).__name__] += time.process_time() - start
    return results


def read_batch(batch):
    """What ``TokenClsDataPreprocessor`` computes for a batch of packed samples."""
    targets = token_label_targets(batch)
    if batch[0].reading == 'official':
        relabel_targets(batch)
    return targets


def time_batch_reading(packed, batch_size, rounds=3):
    """CPU seconds of the per-batch reading (:func:`read_batch`) per batch of ``batch_size`` packed samples."""
    batch = [packed[i % len(packed)] for i in range(batch_size)]
    read_batch(batch)  # warm-up
    start = time.process_time()
    for _ in range(rounds):
        read_batch(batch)
    return (time.process_time() - start) / rounds


def main(argv=None):
    args = parse_args(argv)
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.work_dir or tmp
        paths = write_data(root, args.num_images, args.map_size, args.topk, args.classes_per_image, rng)
        named = pipelines(root, args.token_label_size, args.samples_per_token, args.reading)
        for i, path in enumerate(paths[:4]):  # warm-up (imports, caches)
            for transforms in named.values():
                run(transforms, path, i, defaultdict(float))
        times = {name: defaultdict(float) for name in named}
        packed = defaultdict(list)
        order, seed = list(named), 0
        for _ in range(args.rounds):
            for path in paths:
                seed += 1
                order = order[1:] + order[:1]  # rotate who goes first
                for name in order:
                    results = run(named[name], path, seed, times[name])
                    if 'token_label_map' in results['data_samples']:
                        packed[name].append(results['data_samples'].token_label_map)
    n = args.rounds * len(paths)
    per_image = {name: sum(t.values()) / n for name, t in times.items()}
    print(
        f'{n} samples per pipeline, map {args.topk}x{args.map_size}x{args.map_size} '
        f'(top-{args.topk} of {args.classes_per_image} classes per image), '
        f'{args.token_label_size}x{args.token_label_size} tokens, {args.reading} reading, single thread'
    )
    for name, op_times in times.items():
        print(f'  {name}: {1e3 * per_image[name]:.3f} ms/image')
        for op, seconds in op_times.items():
            print(f'    {op:32s} {1e3 * seconds / n:8.3f} ms')
    targets = [token_label_targets(p) for p in packed.values()]
    if not all(torch.equal(targets[0], t) for t in targets[1:]):
        raise RuntimeError('the packed store, the .npy and the .pt files gave different token labels')
    base = per_image['without label maps']
    overheads = {name: t / base - 1 for name, t in per_image.items() if name != 'without label maps'}
    for name, overhead in overheads.items():
        verdict = 'met' if overhead <= TARGET_OVERHEAD else 'NOT met'
        judged = ' (the recommended set-up)' if 'store' in name else ''
        print(
            f'{name}: the data pipeline is {100 * overhead:.2f}% slower (ratio {1 + overhead:.4f}; '
            f'target <= {100 * TARGET_OVERHEAD:.0f}%: {verdict}){judged}'
        )
    print('token labels from the store, the .npy and the .pt files: identical')
    batch_seconds = time_batch_reading(packed['label maps, packed store'], args.batch_size)
    print(
        f'per-batch token-label reading (TokenClsDataPreprocessor, not in the data pipeline): '
        f'{1e3 * batch_seconds:.1f} ms per batch of {args.batch_size} '
        f'({1e3 * batch_seconds / args.batch_size:.3f} ms/image), single thread'
    )
    return overheads


if __name__ == '__main__':
    main()
