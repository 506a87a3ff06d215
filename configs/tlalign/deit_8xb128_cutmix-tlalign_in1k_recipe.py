# The TL-Align DeiT recipe on ImageNet-1k, shared by DeiT-T/S (they change only the arch): mmpretrain's own
# DeiT-S config with the numbers of the official script, which ran the paper's DeiT-S number (Table 1/9:
# 79.8 -> 80.6). "official" = Euphoria16/TL-Align train_deit_small_tla.sh + main_tla.py defaults.
# The CutMix baseline of Table 1 is the same config with --cfg-options model.target_transform=None.
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'

model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.VisionTransformer', drop_path_rate=0.1),  # official --drop-path 0.1
    # official --mixup 0.0 --cutmix 1.0 (tla.py TL_AlignMix): the box on the 14x14 token grid, lam re-drawn
    # while 1 and corrected to the box area, flip partner, images mixed in pixel space
    train_cfg=dict(_delete_=True, mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=16)),
    target_transform=dict(type='mmvitreg.TLAlign'),  # through every block (the depth from the trace)
    # label smoothing 0.1 (official --smoothing 0.1) stays in the base's LabelSmoothLoss(mode='original');
    # official head init: timm's _init_vit_weights, trunc-normal 0.02 and zero bias (mmpretrain's: zero)
    head=dict(init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0)),
)

# official 8 GPUs x 128 (train_deit_small_tla.sh), repeated augmentation x3 (--repeated-aug, RASampler),
# and the last incomplete batch dropped (official drop_last=True)
train_dataloader = dict(
    batch_size=128, drop_last=True, sampler=dict(_delete_=True, type='RepeatAugSampler', num_repeats=3, shuffle=True)
)

# official lr 5e-4 x 1024 / 512 = 1e-3 (the base's), AdamW wd 0.05, eps 1e-8; no gradient clipping (the base
# clips at 5); AMP (official autocast + NativeScaler)
optim_wrapper = dict(type='AmpOptimWrapper', clip_grad=None)
# official LR: timm's CosineLRScheduler stepped after each epoch (t_in_epochs): --warmup-epochs 5 from
# --warmup-lr 1e-6 (1e-3 of the lr), the cosine to --min-lr 1e-5 laid over the 300 epochs from epoch 0, and
# epoch e trains with the value of e - 1 (epochs 0 and 1 at 1e-6, epoch 5 at 8.0e-4, epoch 6 at 0.9993e-3)
param_scheduler = [
    dict(type='mmvitreg.TimmCosineLR', T_max=300, warmup=5, warmup_lr_init=1e-6, delay=1, eta_min=1e-5, by_epoch=True)
]
train_cfg = dict(max_epochs=300)
# official: no EMA (set_defaults(model_ema=False)); the base has none either
# a long run: the last 3 checkpoints (to resume) and the best top-1, not one per epoch (~265 MB each)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=3, save_best='auto'))
