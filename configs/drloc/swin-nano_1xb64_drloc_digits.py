# DRLoc on the bundled digits with the demo's Swin-nano (2 stages of 32 / 64 channels, 4-pixel patches,
# window 4; mmpretrain's Swin-T recipe) and the recipe's image-level Mixup/CutMix (the official DRLoc
# augmentation) in place of the demo's MixToken. DRLoc reads the last stage's tokens before its norm
# through the token trace (a 4x4 grid at 32x32; Swin-T: 7x7 at 224), official loss form (l1 on raw |Δ|,
# mean, endpoints with replacement), the paper's fixed λ = 0.5 for Swin.
# The baseline of the same run: --cfg-options model.aux_losses=[]
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = '../demo/swin-nano_1xb64_mixtoken_digits.py'

model = dict(
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=64,
            layers=(-1,),
            loss_weight=0.5,
            target='abs',
            reduction='mean',
            replacement=True,
        )
    ],
    train_cfg=dict(_delete_=True, augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
)
