# TL-Align on the bundled digits: the quick-start DeiT-tiny (4 blocks of 96 channels, 8-pixel patches:
# a 4x4 token grid at 32x32) with the official TL-Align CutMix in place of the recipe's Mixup/CutMix
# (box on the token grid, lam corrected to its area, flip partner, images mixed in pixel space; official
# tla.py, --mixup 0 --cutmix 1.0) and the aligned cls-token label as the target (paper Eq. 9-12).
# Label smoothing 0.1 stays in the head's loss (mode='original', as official smoothing before the mix).
# The CutMix baseline of the same run: --cfg-options model.target_transform=None.
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = '../demo/deit-tiny_1xb64_digits.py'

model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.VisionTransformer'),
    target_transform=dict(type='mmvitreg.TLAlign'),  # through every block (the depth from the trace)
    train_cfg=dict(_delete_=True, mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=8)),
)
