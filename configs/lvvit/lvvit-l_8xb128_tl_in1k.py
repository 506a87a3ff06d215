# LV-ViT-L (paper Table 8: 150M): 768-dim, 24 blocks, 128-channel stem, official --drop-path 0.3.
# Official README command: -b 128 x 8, --lr 1e-3, --aa rand-n3-m9-mstd0.5-inc1 (3 RandAugment ops),
# at 224 with token label size 14 (the paper's Table 10 row trains L at 288: set img_size=288 and
# token_label_size=18 for that). Official default_cfg crop_pct 1.0.
_base_ = './lvvit_8xb128_tl_in1k_recipe.py'

model = dict(backbone=dict(arch='l', drop_path_rate=0.3), head=dict(in_channels=768))
# the recipe's training pipeline with 3 RandAugment ops (official rand-n3-m9-mstd0.5-inc1 for L)
train_pipeline = [
    dict(t, num_policies=3) if t.type == 'mmvitreg.RandAugmentWithLabelMap' else t
    for t in _base_.train_dataloader.dataset.pipeline
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
]  # then the recipe's 10 cool-down epochs at 1e-5
