"""Time the ops mmvitreg/mmcv_ops.py serves as mmcv's compiled ones against mmcv's own, side by side, at the sizes
a Cascade Mask R-CNN step gives them.

    python tools/analysis_tools/benchmark_mmcv_ops.py [--device cpu] [--threads N] [--repeats 10] [--warmup 2]

Each op is called as mmcv calls it (outputs allocated by the caller): RPN ``nms`` over 2,000 and 10,000 boxes,
RoIAlign 7x7 of 512 RoIs (8 to 112 pixels a side: those mmdet pools from this level) on the stride-4 FPN map of a
1344x800 image (256 channels; forward and backward: the stand-in's backward runs torchvision's forward again, under
autograd), and mmdet's mask-target RoIAlign 28x28 of 128 binary masks. Prints the median milliseconds of each and
the stand-in / compiled ratio; where mmcv has no compiled ops (mmcv-lite) only the stand-in's column is filled.
"""

import argparse
import importlib
import statistics
import time
import types

import torch

import mmvitreg  # noqa: F401  (serves mmcv._ext where mmcv has none)
from mmvitreg.mmcv_ops import StandIn


def boxes(n, size, generator, device, longest=200):
    """``n`` boxes (n, 4) in a ``size`` (w, h) image, 8 to ``longest`` pixels a side."""
    xy = torch.rand(n, 2, generator=generator) * torch.tensor(size)
    return torch.cat([xy, xy + 8 + torch.rand(n, 2, generator=generator) * (longest - 8)], 1).to(device)


def cases(device):
    """name -> (a function of an ``mmcv._ext`` that runs the op once)."""
    g = torch.Generator().manual_seed(0)
    nms_inputs = {n: (boxes(n, (1344, 800), g, device), torch.rand(n, generator=g).to(device)) for n in (2000, 10000)}
    feats = torch.randn(2, 256, 200, 336, generator=g).to(device)
    rois = torch.cat(
        [
            torch.randint(0, 2, (512, 1), generator=g).float().to(device),
            boxes(512, (1344, 800), g, device, longest=112),
        ],
        1,
    )  # mmdet's stride-4 level: < 112
    pooled = torch.randn(512, 256, 7, 7, generator=g).to(device)
    masks = (torch.rand(128, 1, 400, 672, generator=g) > 0.5).float().to(device)
    mask_rois = torch.cat([torch.arange(128.0).view(-1, 1).to(device), boxes(128, (600, 320), g, device)], 1)
    align = dict(spatial_scale=0.25, sampling_ratio=0, pool_mode=1, aligned=True)
    empty = feats.new_zeros(0)
    return {
        'nms 2,000 boxes': lambda ext: ext.nms(*nms_inputs[2000], iou_threshold=0.7, offset=0),
        'nms 10,000 boxes': lambda ext: ext.nms(*nms_inputs[10000], iou_threshold=0.7, offset=0),
        'roi_align_forward 512x256x7x7': lambda ext: ext.roi_align_forward(
            feats, rois, pooled.new_zeros(pooled.shape), empty, empty, aligned_height=7, aligned_width=7, **align
        ),
        'roi_align_backward 512x256x7x7': lambda ext: ext.roi_align_backward(
            pooled, rois, empty, empty, torch.zeros_like(feats), aligned_height=7, aligned_width=7, **align
        ),
        'roi_align_forward masks 128x28x28': lambda ext: ext.roi_align_forward(
            masks,
            mask_rois,
            masks.new_zeros(128, 1, 28, 28),
            empty,
            empty,
            aligned_height=28,
            aligned_width=28,
            spatial_scale=1.0,
            sampling_ratio=0,
            pool_mode=1,
            aligned=True,
        ),
    }


def median_ms(run, ext, device, warmup, repeats):
    times = []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        run(ext)
        if device.startswith('cuda'):
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--threads', type=int, help='torch CPU threads (default: torch\'s)')
    parser.add_argument('--repeats', type=int, default=10)
    parser.add_argument('--warmup', type=int, default=2)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    served = importlib.import_module('mmcv._ext')
    compiled = None if isinstance(served.__loader__, StandIn) else served
    stand_in = types.ModuleType('mmcv._ext')
    StandIn().exec_module(stand_in)
    print(
        f'torch {torch.__version__}, {args.device}, {torch.get_num_threads()} threads; compiled mmcv._ext: '
        f'{compiled.__file__ if compiled else "none (mmcv-lite)"}'
    )
    print('| op | compiled ms | mmvitreg ms | mmvitreg / compiled |\n|---|---|---|---|')
    for name, run in cases(args.device).items():
        ours = median_ms(run, stand_in, args.device, args.warmup, args.repeats)
        theirs = compiled and median_ms(run, compiled, args.device, args.warmup, args.repeats)
        print(
            f'| {name} | {f"{theirs:.2f}" if compiled else "n/a"} | {ours:.2f} | '
            f'{f"{ours / theirs:.2f}" if compiled else "n/a"} |',
            flush=True,
        )


if __name__ == '__main__':
    main()
