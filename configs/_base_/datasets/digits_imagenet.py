# dataset settings: scikit-learn's handwritten digits in the ImageNet layout (10 classes, 32x32),
# built by `python tools/dataset_converters/digits.py imagenet --out data/`
dataset_type = 'CustomDataset'
data_root = 'data/digits_imagenet'
metainfo = dict(
    classes=(
        'digit_0',
        'digit_1',
        'digit_2',
        'digit_3',
        'digit_4',
        'digit_5',
        'digit_6',
        'digit_7',
        'digit_8',
        'digit_9',
    )
)
data_preprocessor = dict(
    num_classes=10,
    # RGB mean and std of the training images (grey: dark ink on white)
    mean=[175.46, 175.46, 175.46],
    std=[90.59, 90.59, 90.59],
    # convert image from BGR to RGB
    to_rgb=True,
)

# no horizontal flip: a mirrored digit is not the same digit
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=32, crop_ratio_range=(0.7, 1.0), backend='pillow', interpolation='bicubic'),
    dict(type='PackInputs'),
]

test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=32, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=32),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=32,
    num_workers=2,
    persistent_workers=True,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        ann_file='meta/train.txt',
        data_prefix='train',
        metainfo=metainfo,
        pipeline=train_pipeline,
    ),
    sampler=dict(type='DefaultSampler', shuffle=True),
)

val_dataloader = dict(
    batch_size=32,
    num_workers=2,
    persistent_workers=True,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        ann_file='meta/val.txt',
        data_prefix='val',
        metainfo=metainfo,
        pipeline=test_pipeline,
    ),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, 5))

test_dataloader = val_dataloader
test_evaluator = val_evaluator
