# Token labeling + MixToken on the bundled digits (the chain of configs/lvvit/README.md):
# a tiny LV-ViT (conv stem, skip_lam 2) at 32x32 with a 4-pixel token stride (8x8 tokens), trained
# with the token-labeling head on dense maps made by a teacher (resnet18-cifar-w16_1xb64_digits-teacher.py)
# with tools/generate_label_maps.py and packed by tools/dataset_converters/pack_label_maps.py.
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = ['mmpretrain::_base_/default_runtime.py', '../_base_/schedules/digits_adamw_30e.py']

num_classes = 10
img_size = 32
patch_size = 4
data_root = 'data/digits_imagenet'
# the maps of tools/generate_label_maps.py (--img-size 32), packed into a store; the folder of .pt
# maps (data/digits_imagenet/label_maps) works too, at about 4x the loading cost
label_root = 'data/digits_imagenet/label_maps_packed'

# inside `model` (not only top-level) so that tools building the bare model see it too
data_preprocessor = dict(
    num_classes=num_classes, mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True
)
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(
        type='mmvitreg.LVViT',
        arch=dict(
            embed_dims=96,
            num_layers=4,
            num_heads=3,
            feedforward_channels=288,
            stem=dict(channels=16, num_convs=3),
            skip_lam=2.0,
        ),
        img_size=img_size,
        patch_size=patch_size,
        drop_path_rate=0.1,
        out_type='raw',
    ),
    head=dict(
        type='mmvitreg.TokenLabelHead',
        num_classes=num_classes,
        in_channels=96,
        beta=0.5,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
    ),
    train_cfg=dict(mix=dict(type='mmvitreg.MixToken', alpha=1.0, patch_size=patch_size)),
    data_preprocessor=data_preprocessor,
)

metainfo = dict(classes=tuple(f'digit_{i}' for i in range(num_classes)))
# digits are not mirror-symmetric: no flip; mild crops only
train_pipeline = [
    dict(type='LoadImageFromFile'),
    # num_classes: every map's class indices are checked (maps of another teacher fail naming the file)
    dict(
        type='mmvitreg.LoadTokenLabelMap',
        label_root=label_root,
        img_prefix=f'{data_root}/train',
        num_classes=num_classes,
    ),
    dict(
        type='mmvitreg.RandomResizedCropWithLabelMap',
        scale=img_size,
        crop_ratio_range=(0.6, 1.0),
        backend='pillow',
        interpolation='bicubic',
    ),
    dict(type='mmvitreg.TokenLabelTarget', token_label_size=img_size // patch_size, topk=5),
    dict(type='PackInputs', algorithm_keys=['token_label_map']),
]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=64,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(
        type='CustomDataset',
        data_root=data_root,
        ann_file='meta/train.txt',
        data_prefix='train',
        metainfo=metainfo,
        pipeline=train_pipeline,
    ),
)
val_dataloader = dict(
    batch_size=128,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='CustomDataset',
        data_root=data_root,
        ann_file='meta/val.txt',
        data_prefix='val',
        metainfo=metainfo,
        pipeline=test_pipeline,
    ),
)
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_evaluator = val_evaluator

# a checkpoint every 10 epochs (the schedule: ../_base_/schedules/digits_adamw_30e.py)
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=10, max_keep_ckpts=1, save_best='auto'))
