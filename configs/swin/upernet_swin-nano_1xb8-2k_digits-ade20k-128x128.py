# mmseg's own Swin-T UperNet ADE20K recipe (AdamW 6e-5, poly, multi-scale flip TTA) with
# mmvitreg.SwinTransformer (configs/swin/upernet_swin-t_8xb2-160k_ade20k-512x512.py), the model shrunk and
# the data pointed at the bundled ADE20K-layout digits set
# (`python tools/dataset_converters/digits.py ade20k --out data`). The digits UperNets of the technique folders
# inherit it with this 2,000-iteration schedule; configs/demo/upernet_swin-nano_1xb8-300_digits-ade20k-128x128.py
# is the same model on a schedule sized for a CPU.
_base_ = './upernet_swin-t_8xb2-160k_ade20k-512x512.py'

crop_size = (128, 128)
num_classes = 11
data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        init_cfg=None,
        arch=dict(_delete_=True, embed_dims=32, depths=[2, 2, 2, 2], num_heads=[1, 2, 4, 8]),
        window_size=4,
        drop_path_rate=0.1,
    ),
    decode_head=dict(in_channels=[32, 64, 128, 256], channels=64, num_classes=num_classes),
    auxiliary_head=dict(in_channels=128, channels=32, num_classes=num_classes),
)

# ADE20KDataset's settings through BaseSegDataset: mmseg 1.2.2's ADE20KDataset refuses class names
# outside its own 150 (see configs/_base_/datasets/digits_ade20k.py)
data_root = 'data/digits_ade20k'
digits_ade20k = dict(
    _delete_=True,
    type='BaseSegDataset',
    data_root=data_root,
    img_suffix='.jpg',
    seg_map_suffix='.png',
    reduce_zero_label=True,
)
metainfo = dict(classes=('background',) + tuple(f'digit_{i}' for i in range(10)))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomResize', scale=(512, 128), ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(512, 128), keep_ratio=True),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(
    batch_size=8,
    dataset=dict(
        **digits_ade20k,
        metainfo=metainfo,
        pipeline=train_pipeline,
        data_prefix=dict(img_path='images/training', seg_map_path='annotations/training'),
    ),
)
val_dataloader = dict(
    dataset=dict(
        **digits_ade20k,
        metainfo=metainfo,
        pipeline=test_pipeline,
        data_prefix=dict(img_path='images/validation', seg_map_path='annotations/validation'),
    )
)
test_dataloader = val_dataloader
# the inherited tta_pipeline (ratios 0.5-1.75, flip) scales the 128x128 canvases directly

max_iters = 2000
train_cfg = dict(max_iters=max_iters, val_interval=500)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=100),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=100, end=max_iters, by_epoch=False),
]
default_hooks = dict(checkpoint=dict(interval=500, max_keep_ckpts=1), logger=dict(interval=50))
