# TL-Align on the bundled digits with a Swin: the demo Swin-nano (mmpretrain's own Swin-T recipe, 2 stages
# of 2 blocks, window 4, an 8x8 token grid at 32x32) with the official TL-Align CutMix in place of MixToken
# (box on the 4-pixel token grid, lam corrected to its area, flip partner, images mixed in pixel space;
# official tla.py, --mixup 0 --cutmix 1.0) and the mean aligned token label as the target (Swin has no cls
# token; labels follow window padding, cyclic shift and 2x2 merging, paper Table 10). Label smoothing 0.1
# stays in the recipe's loss (mode='original').
# The CutMix baseline of the same run: --cfg-options model.target_transform=None.
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = '../demo/swin-nano_1xb64_mixtoken_digits.py'

model = dict(
    target_transform=dict(type='mmvitreg.TLAlign'),  # through every block (the depth from the trace)
    train_cfg=dict(_delete_=True, mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=4)),
)
