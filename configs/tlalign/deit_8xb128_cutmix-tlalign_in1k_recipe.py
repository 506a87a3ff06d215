# The TL-Align DeiT recipe on ImageNet-1k, shared by DeiT-T/S (they change only the arch): mmpretrain's own
# DeiT-S config with the numbers of the official script, which ran the paper's DeiT-S number (Table 1/9:
# 79.8 -> 80.6). "official" = Euphoria16/TL-Align train_deit_small_tla.sh + main_tla.py defaults.
# The CutMix baseline of Table 1 is the same config with --cfg-options model.target_transform=None.
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'

num_layers = 12  # DeiT-T/S/B blocks: TL-Align carries the labels through all of them
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.VisionTransformer', drop_path_rate=0.1),  # official --drop-path 0.1
    # official --mixup 0.0 --cutmix 1.0 (tla.py TL_AlignMix): the box on the 14x14 token grid, lam re-drawn
    # while 1 and corrected to the box area, flip partner, images mixed in pixel space
    train_cfg=dict(_delete_=True, token_mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=16)),
    target_transform=dict(type='mmvitreg.TLAlign', num_layers=num_layers),
    # label smoothing 0.1 (official --smoothing 0.1) stays in the base's LabelSmoothLoss(mode='original')
)

# official 8 GPUs x 128 (train_deit_small_tla.sh), repeated augmentation x3 (--repeated-aug, RASampler)
train_dataloader = dict(batch_size=128, sampler=dict(_delete_=True, type='RepeatAugSampler', num_repeats=3,
                                                     shuffle=True))

# official lr 5e-4 x 1024 / 512 = 1e-3 (the base's), AdamW wd 0.05, eps 1e-8; no gradient clipping (the base
# clips at 5); AMP (official autocast + NativeScaler)
optim_wrapper = dict(type='AmpOptimWrapper', clip_grad=None)
# official --warmup-epochs 5 from --warmup-lr 1e-6 (1e-3 of the lr), cosine to --min-lr 1e-5, 300 epochs
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=5, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5),
]
train_cfg = dict(max_epochs=300)
# official: no EMA (set_defaults(model_ema=False)); the base has none either
