# DRLoc on the bundled digits with a tiny mmvitreg.CvT (3 stages of 32 / 64 / 128 channels, depths 1 / 1 / 2,
# token-embedding strides 2 / 2 / 2: a 4x4 last-stage grid at 32x32, the cls token in the last stage) on
# the shared digits schedule with Mixup/CutMix and label smoothing (the ImageNet recipes' augmentation).
# DRLoc reads the last stage's tokens through the token trace (CvT-13: 14x14 at 224, pooled to 7x7), no
# pooling at this size; official loss form, the paper's λ = 0.1 for CvT. Baseline: model.aux_losses=[]
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = [
    '../_base_/datasets/digits_imagenet.py',
    '../_base_/schedules/digits_adamw_30e.py',
    'mmpretrain::_base_/default_runtime.py',
]

embed_dims = 128
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(
        type='mmvitreg.CvT',
        arch=dict(embed_dims=(32, 64, embed_dims), depths=(1, 1, 2), num_heads=(1, 2, 4)),
        embed_kernels=(3, 3, 3),
        embed_strides=(2, 2, 2),
        embed_paddings=(1, 1, 1),
    ),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=embed_dims,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
    ),
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=embed_dims,
            layers=(-1,),
            loss_weight=0.1,
            target='abs',
            reduction='mean',
            replacement=True,
        )
    ],
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
)
train_dataloader = dict(batch_size=64)
val_dataloader = dict(batch_size=128)
test_dataloader = val_dataloader
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=10, max_keep_ckpts=1, save_best='auto'))
