# LV-ViT-M (paper Table 8: 56M, 84.0%): 512-dim, 20 blocks, official --drop-path 0.2.
# Official default_cfg crop_pct 1.0: resize the short edge to 224, centre crop 224.
_base_ = './lvvit_8xb128_tl_in1k_recipe.py'

model = dict(backbone=dict(arch='m', drop_path_rate=0.2), head=dict(in_channels=512))
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=224, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
