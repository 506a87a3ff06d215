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
        type='mmvitreg.VisionTransformer', drop_path_rate=0.5
    ),  # paper: "linearly increase the depth dropout ratio from 0 to .5" (over the blocks)
    head=dict(in_channels=embed_dims),
    aux_losses=[
        dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0),  # alpha_1 = 1 (paper)
        dict(type='mmvitreg.PatchContrastiveLoss', loss_weight=1.0),  # alpha_2 = 1
        dict(type='mmvitreg.PatchMixingLoss', num_classes=1000, in_channels=embed_dims, loss_weight=1.0),  # alpha_3
    ],
    # paper: MixUp removed, CutMix kept; the mixing loss mixes patches on the 14x14 token grid
    # (official engine.two_mix: whole 16-px patches); PatchCutMix is that one patch-aligned CutMix
    train_cfg=dict(_delete_=True, mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=16)),
)

max_epochs = 400  # paper: "we train all DeiT baselines and our models for 400 epochs"
train_cfg = dict(max_epochs=max_epochs)
# official LR (DeiT main.py: timm's CosineLRScheduler stepped after each epoch): --warmup-epochs 5 from
# --warmup-lr 1e-6, the cosine to --min-lr 1e-7 (DeiT: 1e-5) laid over all epochs from epoch 0, epoch e at the
# value of e - 1 (mmvitreg.TimmCosineLR)
param_scheduler = [
    dict(
        type='mmvitreg.TimmCosineLR',
        T_max=max_epochs,
        warmup=5,
        warmup_lr_init=1e-6,
        delay=1,
        eta_min=1e-7,
        by_epoch=True,
    )
]
optim_wrapper = dict(clip_grad=None)  # official: --clip-grad None (the NativeScaler path clips nothing)
# official: the raw model is evaluated (the EMA it keeps, --model-ema-decay 0.99996, is never evaluated): no EMA
# a long run: the last 3 checkpoints (to resume) and the best top-1, not one per epoch (~265 MB each)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=3, save_best='auto'))
