# T2T-ViT-14 with DRLoc as in the official code (models/t2t.py): mmpretrain's T2T-ViT-t-14 classifier with
# drop path 0 (the official T2t_vit_14 builder passes none), its raw tokens after the final norm handed to
# DRLoc (cls token dropped, 14x14 -> official AvgPool2d(3, 2, 1, count_include_pad=False) -> 7x7; the paper
# says 2x2 average pooling: grid_pool='avg2x2') and mmvitreg.ClsTokenNeck giving the head the cls token.
# Trunc-normal MLP init (the official model's apply(_init_weights) reaches it). Official loss form, λ = 0.1.
_base_ = 'mmpretrain::_base_/models/t2t-vit-t-14.py'

model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(drop_path_rate=0.0, out_type='raw'),
    neck=dict(_delete_=True, type='mmvitreg.ClsTokenNeck'),
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=384,
            num_pairs=64,
            loss_weight=0.1,
            grid_pool='avg3x3',
            target='abs',
            reduction='mean',
            replacement=True,
            init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
        )
    ],
)
