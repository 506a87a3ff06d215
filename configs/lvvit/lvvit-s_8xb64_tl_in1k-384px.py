# LV-ViT-S fine-tuned at 384 (paper Table 3: 84.4%), the official README fine-tuning command:
# -b 64 x 8 GPUs, --img-size 384 --token-label-size 24 --lr 5e-6 --min-lr 5e-6 --weight-decay 1e-8
# --drop-path 0.1 --token-label --finetune CKPT (`load_from`; the position embedding is resized on
# load), no --model-ema. What the command leaves unset takes main.py's defaults: --epochs 300 with
# --cooldown-epochs 10 and --warmup-epochs 5 from --warmup-lr 1e-6, i.e. 5 warm-up epochs to 5e-6,
# then a constant 5e-6 up to epoch 310 (the paper gives no fine-tuning schedule). Official default_cfg
# for 384: crop_pct 1.0. Also the eval config of the official lvvit_s 384 checkpoint.
_base_ = './lvvit-s_8xb128_tl_in1k.py'

img_size = 384
token_label_size = 24
load_from = 'work_dirs/lvvit-s_8xb128_tl_in1k/epoch_300.pth'

model = dict(backbone=dict(img_size=img_size))
# the 224 recipe's pipelines at the new size (crop_pct 1.0: resize the short edge to the crop)
_sizes = {
    'mmvitreg.RandomResizedCropWithLabelMap': dict(scale=img_size),
    'mmvitreg.TokenLabelTarget': dict(token_label_size=token_label_size),
    'ResizeEdge': dict(scale=img_size),
    'CenterCrop': dict(crop_size=img_size),
}
train_pipeline = [dict(t, **_sizes.get(t.type, {})) for t in _base_.train_dataloader.dataset.pipeline]
test_pipeline = [dict(t, **_sizes.get(t.type, {})) for t in _base_.val_dataloader.dataset.pipeline]
del _sizes
train_dataloader = dict(batch_size=64, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=64, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

optim_wrapper = dict(optimizer=dict(lr=5e-6, weight_decay=1e-8))
max_epochs = 310  # main.py --epochs 300 + --cooldown-epochs 10
warmup_epochs = 5  # main.py --warmup-epochs 5 --warmup-lr 1e-6
# the cosine from --lr 5e-6 to --min-lr 5e-6 is constant: only the warm-up schedules anything
param_scheduler = [
    dict(
        type='LinearLR', start_factor=1e-6 / 5e-6, by_epoch=True, begin=0, end=warmup_epochs, convert_to_iter_based=True
    ),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
auto_scale_lr = dict(base_batch_size=512)
custom_hooks = []  # the fine-tuning command has no --model-ema
