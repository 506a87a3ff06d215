# DeiT-Base12 + DiversePatch, 400 epochs (paper Table 1: 82.9 top-1; baseline 82.1).
_base_ = './deit_4xb256_diversepatch_in1k_recipe.py'

embed_dims = 768
model = dict(
    backbone=dict(arch='deit-base'),
    head=dict(in_channels=embed_dims),
    aux_losses=[
        dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0),
        dict(type='mmvitreg.PatchContrastiveLoss', loss_weight=1.0),
        dict(type='mmvitreg.PatchMixingLoss', num_classes=1000, in_channels=embed_dims, loss_weight=1.0),
    ],
)
