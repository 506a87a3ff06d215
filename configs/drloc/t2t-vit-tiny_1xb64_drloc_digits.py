# DRLoc on the bundled digits with a tiny mmpretrain T2T_ViT (2 blocks of 64 channels; mmpretrain's
# T2T-ViT-t-14 recipe: Mixup/CutMix, label smoothing, AdamW) at 64x64 (the T2T module's three soft splits
# take 64 pixels to a 4x4 token grid, 32 pixels only to 2x2) on the shared digits schedule. No trace: the
# backbone gives its raw tokens after the final norm (the official T2T path), DRLoc drops the cls token
# and reads the 4x4 grid (no pooling at this size), mmvitreg.ClsTokenNeck hands the head the cls token.
# Official loss form, the paper's λ = 0.1 for T2T. The baseline: --cfg-options model.aux_losses=[]
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = [
    'mmpretrain::_base_/models/t2t-vit-t-14.py',
    '../_base_/datasets/digits_imagenet.py',
    '../_base_/schedules/digits_adamw_30e.py',
    'mmpretrain::_base_/default_runtime.py',
]

embed_dims = 64
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(
        img_size=64,
        embed_dims=embed_dims,
        num_layers=2,
        out_type='raw',
        t2t_cfg=dict(token_dims=32),
        layer_cfgs=dict(num_heads=2, feedforward_channels=3 * embed_dims),
    ),
    neck=dict(_delete_=True, type='mmvitreg.ClsTokenNeck'),
    head=dict(num_classes=10, in_channels=embed_dims),
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=embed_dims,
            loss_weight=0.1,
            target='abs',
            reduction='mean',
            replacement=True,
        )
    ],
)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=64, crop_ratio_range=(0.7, 1.0), backend='pillow', interpolation='bicubic'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=64, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=64, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=128, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=10, max_keep_ckpts=1, save_best='auto'))
