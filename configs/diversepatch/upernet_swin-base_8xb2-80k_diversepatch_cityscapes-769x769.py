# UperNet Swin-B on Cityscapes with the DiversePatch Swin-B backbone (paper Table 4: 80.8 / 81.8 ms+flip; Swin-B
# 80.4 / 81.5): the ADE20K recipe of this folder on mmseg's Cityscapes 769x769 setting (paper: "769x769 crop
# size ... following the default setting in mmsegmentation", 80K iterations, evaluated at 2049x1025).
_base_ = './upernet_swin-base_8xb2-160k_diversepatch_ade20k-512x512.py'

num_classes = 19  # paper: 19 categories (+ unknown, ignored); mmseg's CityscapesDataset
crop_size = (769, 769)
model = dict(
    data_preprocessor=dict(size=crop_size),
    decode_head=dict(num_classes=num_classes),
    auxiliary_head=dict(num_classes=num_classes),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(513, 513)),
)  # mmseg's 769x769 Cityscapes test

# mmseg's _base_/datasets/cityscapes_769x769.py
dataset_type = 'CityscapesDataset'
data_root = 'data/cityscapes/'
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomResize', scale=(2049, 1025), ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2049, 1025), keep_ratio=True),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type=dataset_type,
        data_root=data_root,
        data_prefix=dict(img_path='leftImg8bit/train', seg_map_path='gtFine/train'),
        pipeline=train_pipeline,
    )
)
val_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type=dataset_type,
        data_root=data_root,
        data_prefix=dict(img_path='leftImg8bit/val', seg_map_path='gtFine/val'),
        pipeline=test_pipeline,
    )
)
test_dataloader = val_dataloader
tta_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(
        type='TestTimeAug',
        transforms=[
            [dict(type='Resize', scale_factor=r, keep_ratio=True) for r in [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]],
            [
                dict(type='RandomFlip', prob=0.0, direction='horizontal'),
                dict(type='RandomFlip', prob=1.0, direction='horizontal'),
            ],
            [dict(type='LoadAnnotations')],
            [dict(type='PackSegInputs')],
        ],
    ),
]

max_iters = 80000  # paper: 80K iterations on Cityscapes
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='CosineAnnealingLR', eta_min=0.0, by_epoch=False, begin=1500, end=max_iters),
]
train_cfg = dict(max_iters=max_iters)
