# LV-ViT-L (paper Table 8: 150M): 768-dim, 24 blocks, 128-channel stem, official --drop-path 0.3.
# Official README command: -b 128 x 8, --lr 1e-3, --aa rand-n3-m9-mstd0.5-inc1 (3 RandAugment ops),
# at 224 with token label size 14 (the paper's Table 10 row trains L at 288: set img_size=288 and
# token_label_size=18 for that). Official default_cfg crop_pct 1.0.
_base_ = './lvvit_8xb128_tl_in1k_recipe.py'

model = dict(backbone=dict(arch='l', drop_path_rate=0.3), head=dict(in_channels=768))
label_root = {{_base_.label_root}}
bgr_mean = [103.53, 116.28, 123.675]
bgr_std = [57.375, 57.12, 58.395]
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='mmvitreg.LoadTokenLabelMap', label_root=label_root),
    dict(type='mmvitreg.RandomFlipWithLabelMap', prob=0.5, direction='horizontal'),
    dict(
        type='mmvitreg.RandAugmentWithLabelMap',
        policies='timm_increasing',
        num_policies=3,  # official rand-n3-m9-mstd0.5-inc1 for L
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(pad_val=[round(x) for x in bgr_mean], interpolation='bicubic')),
    dict(type='mmvitreg.RandomResizedCropWithLabelMap', scale=224, backend='pillow', interpolation='bicubic'),
    dict(type='RandomErasing', erase_prob=0.25, mode='rand', min_area_ratio=0.02, max_area_ratio=1 / 3,
         fill_color=bgr_mean, fill_std=bgr_std),
    dict(type='mmvitreg.TokenLabelTarget', token_label_size=14, topk=5),
    dict(type='PackInputs', algorithm_keys=['token_label_map']),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=224, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / 1e-3, by_epoch=True, end=5, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5, end=300),
]
