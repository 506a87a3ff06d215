# DiversePatch on the bundled digits: a deep, narrow DeiT (12 blocks of 64 channels, 8-pixel patches: a
# 4x4 token grid at 32x32) from the quick-start DeiT recipe (mmpretrain::deit, via the demo config), with
# the paper's recipe changes: MixUp removed, CutMix kept as patch-aligned CutMix on the token grid (the
# mixing plan the patch-wise mixing loss reads; official engine.two_mix mixes whole 16-px patches), and the
# three losses with alpha_1 = alpha_2 = alpha_3 = 1 (paper §4, "we simply set alpha = 1").
# The plain baseline of the same run: --cfg-options model.aux_losses=[]
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = '../demo/deit-tiny_1xb64_digits.py'

embed_dims = 64
patch_size = 8
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(
        type='mmvitreg.VisionTransformer',
        arch=dict(embed_dims=embed_dims, num_layers=12, num_heads=2, feedforward_channels=4 * embed_dims),
        patch_size=patch_size,
        drop_path_rate=0.1,
    ),
    head=dict(in_channels=embed_dims),
    aux_losses=[
        dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0),
        dict(type='mmvitreg.PatchContrastiveLoss', loss_weight=1.0),
        dict(type='mmvitreg.PatchMixingLoss', num_classes=10, in_channels=embed_dims, loss_weight=1.0),
    ],
    train_cfg=dict(_delete_=True, mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=patch_size)),
)
