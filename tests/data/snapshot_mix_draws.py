"""Print the draws of every mixing plan for seeds 0..2 as a Python literal (``MIX_DRAWS`` of
``tests/test_mixing_family.py``).

Run on the code before the mixing family was refactored onto one base (commit c15437c), from the
repository root: ``PYTHONPATH=. python tests/data/snapshot_mix_draws.py``. The test asserts that the refactored plans
draw exactly these values, and consume the random generators alike (the next draw of numpy and torch).
"""

from pprint import pformat

import numpy as np
import torch

from mmvitreg.models import mixing

#: (name, class, arguments); images (3, 3, 24, 32) with patch_size 8: a (3, 4) token grid
CASES = [
    ('MixToken', 'MixToken', {}),
    ('MixToken-permute', 'MixToken', dict(partner='permute')),
    ('MixToken-minmax', 'MixToken', dict(cutmix_minmax=[0.3, 0.8])),
    ('PatchCutMix', 'PatchCutMix', {}),
    ('PatchCutMix-pixels', 'PatchCutMix', dict(box_on='pixels')),
    ('PatchCutMix-permute', 'PatchCutMix', dict(partner='permute', alpha=0.5)),
    ('PixelMixup', 'PixelMixup', {}),
    ('MixupCutMixSwitch', 'MixupCutMixSwitch', {}),
    ('RandomPatchMix', 'RandomPatchMix', {}),
    ('BlockMix', 'BlockMix', dict(min_block=2)),
    ('BlockMix-permute', 'BlockMix', dict(partner='permute')),
]
SEEDS = (0, 1, 2)


def encode(mask):
    """A binary ``(Hg, Wg)`` mask as rows of digits ('0110/1111/...'), a uniform one as its value, any other
    as rounded floats."""
    if ((mask == 0) | (mask == 1)).all():
        return '/'.join(''.join(str(int(v)) for v in row) for row in mask.tolist())
    if (mask == mask.flatten()[0]).all():
        return round(float(mask.flatten()[0]), 6)
    return tuple(round(v, 6) for v in mask.flatten().tolist())


def draws(cls_name, kwargs, seed):
    """``(index, token masks, pixel-mask sums, next numpy draw, next torch draw)`` of one plan."""
    np.random.seed(seed)
    torch.manual_seed(seed)
    plan = getattr(mixing, cls_name)(patch_size=8, **kwargs).plan(torch.zeros(3, 3, 24, 32))
    pixels = None if plan.pixel_mask is None else tuple(round(v, 4) for v in plan.pixel_mask.flatten(1).sum(1).tolist())
    return (
        tuple(plan.index.tolist()),
        tuple(encode(m) for m in plan.mask),
        pixels,
        round(float(np.random.rand()), 6),
        round(float(torch.rand(1)), 6),
    )


if __name__ == '__main__':
    print('MIX_DRAWS = {')
    for name, cls_name, kwargs in CASES:
        print(f'    {name!r}: [')
        for seed in SEEDS:
            print('        ' + pformat(draws(cls_name, kwargs, seed), width=112).replace('\n', '\n         ') + ',')
        print('    ],')
    print('}')
