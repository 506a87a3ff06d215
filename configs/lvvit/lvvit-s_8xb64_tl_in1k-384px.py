# LV-ViT-S fine-tuned at 384 (paper Table 3: 84.4%; official README fine-tuning command):
# -b 64 x 8 GPUs, --img-size 384 --token-label-size 24 --lr 5e-6 --min-lr 5e-6 (a constant lr)
# --weight-decay 1e-8 --drop-path 0.1, from the 224 checkpoint (`load_from`; the position embedding is
# resized on load). The command leaves the epoch count open: 30 here. Official default_cfg for 384:
# crop_pct 1.0. Also the eval config of the official lvvit_s 384 checkpoint.
_base_ = './lvvit-s_8xb128_tl_in1k.py'

img_size = 384
token_label_size = 24
label_root = 'data/imagenet/label_top5_train_nfnet'
bgr_mean = [103.53, 116.28, 123.675]
bgr_std = [57.375, 57.12, 58.395]
load_from = 'work_dirs/lvvit-s_8xb128_tl_in1k/epoch_300.pth'

model = dict(backbone=dict(img_size=img_size))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='mmvitreg.LoadTokenLabelMap', label_root=label_root),
    dict(type='mmvitreg.RandomFlipWithLabelMap', prob=0.5, direction='horizontal'),
    dict(
        type='mmvitreg.RandAugmentWithLabelMap',
        policies='timm_increasing',
        num_policies=2,
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
train_dataloader = dict(batch_size=64, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=64, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

optim_wrapper = dict(optimizer=dict(lr=5e-6, weight_decay=1e-8))
max_epochs = 30
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=max_epochs)]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
auto_scale_lr = dict(base_batch_size=512)
