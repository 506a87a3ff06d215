# ResNet-50 with DRLoc on its layer4 map (7x7 at 224, no trace; official models/resnet.py): mmpretrain's
# ResNet-50 classifier trained with the official recipe's Mixup 0.8 / CutMix 1.0 and label smoothing 0.1
# (paper: "the standard ResNet training protocol (e.g. Mixup and CutMix)"). Official loss form, m = 64,
# λ = 0.5: the official main.py default (train.sh names λ only for Swin / T2T / CvT; the paper none).
_base_ = 'mmpretrain::_base_/models/resnet50.py'

model = dict(
    type='mmvitreg.TokenClassifier',
    head=dict(loss=dict(_delete_=True, type='LabelSmoothLoss', label_smooth_val=0.1, mode='original')),
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=2048,
            num_pairs=64,
            loss_weight=0.5,
            target='abs',
            reduction='mean',
            replacement=True,
        )
    ],
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
)
