# 155 s on 2 cores (train + test, one intra-op thread, 2026-12-07); top-1 86.53 (chance 10).
# The quick-start config: mmpretrain's own DeiT-tiny recipe (Mixup/CutMix, label smoothing, AdamW,
# cosine) with the model shrunk for 32x32 digits and the data pointed at the bundled digits set
# (build it with `python tools/dataset_converters/digits.py imagenet --out data`).
_base_ = 'mmpretrain::deit/deit-tiny_4xb256_in1k.py'

num_classes = 10
model = dict(
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=96, num_layers=4, num_heads=3, feedforward_channels=384),
        img_size=32,
        patch_size=8,
    ),  # a 4x4 token grid keeps the quick start within minutes on 2 cores
    head=dict(num_classes=num_classes, in_channels=96),
)
data_preprocessor = dict(num_classes=num_classes)

data_root = 'data/digits_imagenet'
metainfo = dict(classes=tuple(f'digit_{i}' for i in range(num_classes)))
# digits are not mirror-symmetric: no horizontal flip; mild crops only
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=32, crop_ratio_range=(0.6, 1.0), backend='pillow', interpolation='bicubic'),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=64,
    num_workers=2,
    dataset=dict(
        _delete_=True,
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
    dataset=dict(
        _delete_=True,
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

# a short schedule: 30 epochs of ~1500 images, 2 warm-up epochs
max_epochs = 30
train_cfg = dict(max_epochs=max_epochs, val_interval=10)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=2, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=2, end=max_epochs),
]
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=10, max_keep_ckpts=1, save_best='auto'))
auto_scale_lr = dict(base_batch_size=64)
# seeded, so that two runs on one machine print the same top-1 (README); not `deterministic=True`, which makes
# torch refuse the non-deterministic CUDA kernels a GPU run would use
randomness = dict(seed=0)
