# CvT-13 with DRLoc: mmvitreg.CvT (the published CvT-13, 20M parameters; its normed cls token feeds a
# linear head) without stochastic depth (the DRLoc code's CvT has no dropout), the last stage's 14x14
# token map read through the token trace and pooled to 7x7 by the official AvgPool2d(3, 2, 1) (paper:
# 2x2 average pooling), the training augmentation of the official recipe (Mixup 0.8 / CutMix 1.0, label
# smoothing 0.1). Official loss form (l1 on raw |Δ|, mean, with replacement), m = 64, λ = 0.1.
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.CvT', arch='13', drop_path_rate=0.0),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=384,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
    ),
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=384,
            layers=(-1,),
            num_pairs=64,
            loss_weight=0.1,
            grid_pool='avg3x3',
            target='abs',
            reduction='mean',
            replacement=True,
        )
    ],
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
)
