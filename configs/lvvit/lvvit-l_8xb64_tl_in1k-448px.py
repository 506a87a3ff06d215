# LV-ViT-L at 448 (paper Table 10 "LV-ViT-L↑448": 86.2%; official README checkpoint 86.2 at 448):
# the 384 fine-tuning recipe at 448 px with token label size 28 (448 / 16), from the 224 L checkpoint.
# Also the eval config of the official lvvit_l 448 checkpoint (crop_pct 1.0).
_base_ = './lvvit-s_8xb64_tl_in1k-384px.py'

img_size = 448
token_label_size = 28
label_root = 'data/imagenet/label_top5_train_nfnet'
bgr_mean = [103.53, 116.28, 123.675]
bgr_std = [57.375, 57.12, 58.395]
load_from = 'work_dirs/lvvit-l_8xb128_tl_in1k/epoch_300.pth'

model = dict(backbone=dict(arch='l', img_size=img_size, drop_path_rate=0.3), head=dict(in_channels=768))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='mmvitreg.LoadTokenLabelMap', label_root=label_root),
    dict(type='mmvitreg.RandomFlipWithLabelMap', prob=0.5, direction='horizontal'),
    dict(
        type='mmvitreg.RandAugmentWithLabelMap',
        policies='timm_increasing',
        num_policies=3,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(pad_val=[round(x) for x in bgr_mean], interpolation='bicubic')),
    dict(type='mmvitreg.RandomResizedCropWithLabelMap', scale=img_size, backend='pillow',
         interpolation='bicubic'),
    dict(type='RandomErasing', erase_prob=0.25, mode='rand', min_area_ratio=0.02, max_area_ratio=1 / 3,
         fill_color=bgr_mean, fill_std=bgr_std),
    dict(type='mmvitreg.TokenLabelTarget', token_label_size=token_label_size, topk=5),
    dict(type='PackInputs', algorithm_keys=['token_label_map']),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=img_size, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=img_size),
    dict(type='PackInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
