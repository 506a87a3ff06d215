# The DiversePatch DeiT ImageNet-1k recipe, shared by the DeiT-Small/Base 12/24 configs of this folder (they
# change only the arch). "paper" = DiversePatch §5.1 (https://arxiv.org/abs/2104.12753); "official" =
# ChengyueGongR/PatchVisionTransformer deit/main.py defaults and the README command.
# Paper: "we closely follow the training settings provided in DeiT", 400 epochs, stochastic depth up to 0.5,
# MixUp and repeated augmentation removed; the three losses with alpha = 1.
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'  # DeiT: batch 1024, AdamW 5e-4 * 1024 / 512, wd 0.05,
# RandAugment m9, random erasing 0.25, label smoothing 0.1, no repeated augmentation (DefaultSampler)

embed_dims = 384
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(
        type='mmvitreg.VisionTransformer',
        drop_path_rate=0.5),  # paper: "linearly increase the depth dropout ratio from 0 to .5" (over the blocks)
    head=dict(in_channels=embed_dims),
    aux_losses=[
        dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0),  # alpha_1 = 1 (paper)
        dict(type='mmvitreg.PatchContrastiveLoss', loss_weight=1.0),  # alpha_2 = 1
        dict(type='mmvitreg.PatchMixingLoss', num_classes=1000, in_channels=embed_dims, loss_weight=1.0),  # alpha_3
    ],
    # paper: MixUp removed, CutMix kept; the mixing loss mixes patches on the 14x14 token grid
    # (official engine.two_mix: whole 16-px patches); PatchCutMix is that one patch-aligned CutMix
    train_cfg=dict(_delete_=True, token_mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=16)),
)

max_epochs = 400  # paper: "we train all DeiT baselines and our models for 400 epochs"
train_cfg = dict(max_epochs=max_epochs)
warmup_epochs = 5  # official --warmup-epochs 5 (DeiT)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / 1e-3, by_epoch=True, end=warmup_epochs, convert_to_iter_based=True),
    # official --min-lr 1e-7 (DeiT: 1e-5)
    dict(type='CosineAnnealingLR', eta_min=1e-7, by_epoch=True, begin=warmup_epochs, end=max_epochs,
         convert_to_iter_based=True),
]
optim_wrapper = dict(clip_grad=None)  # official: --clip-grad None (the NativeScaler path clips nothing)
custom_hooks = [dict(type='EMAHook', momentum=4e-5, priority='ABOVE_NORMAL')]  # official --model-ema-decay 0.99996
