# TL-Align Swin-T on ImageNet-1k from scratch (paper Table 1: 81.2 -> 81.4 top-1): mmpretrain's own Swin-T
# recipe (the official Swin recipe: 16 x 64, AdamW 1e-3, wd 0.05, 20 warm-up epochs, cosine, 300 epochs,
# grad clip 5, drop path 0.2, RandAugment, random erasing 0.25, label smoothing 0.1) with, as the paper says,
# "all the data augmentation policies and all hyperparameter settings unchanged ... the only modification is
# that we replace the mixing targets in CutMix with the labels obtained by TL-Align": the recipe's
# MixUp 0.8 / CutMix 1.0 switch (p 0.5) drawn as a plan, CutMix's box in pixels as timm's (each token starts
# with its share of own pixels), and the mean aligned token label as the target. No official Swin code.
# The CutMix baseline: --cfg-options model.target_transform=None.
_base_ = 'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'

model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.SwinTransformer'),
    train_cfg=dict(
        _delete_=True,
        mix=dict(
            type='mmvitreg.MixupCutMixSwitch',
            mixup_alpha=0.8,
            cutmix_alpha=1.0,
            switch_prob=0.5,
            patch_size=4,
            box_on='pixels',
        ),
    ),
    target_transform=dict(type='mmvitreg.TLAlign'),  # through all sum(depths) blocks (from the trace)
)
# a long run: the last 3 checkpoints (to resume) and the best top-1, not one per epoch (~265 MB each)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=3, save_best='auto'))
