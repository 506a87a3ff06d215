# The DeepViT ImageNet-1k recipe, shared by every preset in this folder (they change only the arch).
# "paper" = DeepViT §5.1 (https://arxiv.org/abs/2103.11886); "official" = zhoudaquan/dvit_repo
# scripts/DeepViT_{S,L}_CNN_patch.yaml and DeepViT_24B_pure_transformer.yaml (timm train.py).
# The paper's numbers win where it gives one, except where the YAMLs (the runs behind the published
# numbers) differ from the text: warm-up and the BatchNorm re-calibration follow the YAMLs/train.py.
_base_ = [
    '../_base_/models/deepvit.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
]

model = dict(
    backbone=dict(drop_path_rate=0.2),  # official `drop_path: 0.2` (paper: not stated)
    # official `mixup: 0.8`, `cutmix: 1.0`, `mixup_switch_prob: 0.5` (one of the two per batch);
    # paper: "mixup and random augmentation", no values
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
)

# official `mean: null, std: null` -> the model's default_cfg mean = std = (0.5, 0.5, 0.5)
data_preprocessor = dict(mean=[127.5, 127.5, 127.5], std=[127.5, 127.5, 127.5], to_rgb=True)
pixel_mean = [127.5, 127.5, 127.5]  # the same in BGR

train_pipeline = [
    dict(type='LoadImageFromFile'),
    # official: RandomResizedCrop scale (0.08, 1), ratio (3/4, 4/3) to 224 (paper: 224x224), hflip 0.5;
    # the official `train_interpolation: random` (bilinear or bicubic) is bicubic here
    dict(type='RandomResizedCrop', scale=224, backend='pillow', interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    # official `aa: rand-m9-mstd0.5-inc1`: 2 ops, magnitude 9 of 10 with std 0.5, increasing ops,
    # fill = round(255 * 0.5)
    dict(
        type='RandAugment',
        policies='timm_increasing',
        num_policies=2,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(pad_val=[round(x) for x in pixel_mean], interpolation='bicubic'),
    ),
    # official `reprob: 0.25`, `remode: pixel` (per-pixel N(0, 1) after normalisation), `recount: 1`
    dict(
        type='RandomErasing',
        erase_prob=0.25,
        mode='rand',
        min_area_ratio=0.02,
        max_area_ratio=1 / 3,
        fill_color=pixel_mean,
        fill_std=[127.5, 127.5, 127.5],
    ),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    # official default_cfg crop_pct 0.9: resize the short edge to floor(224 / 0.9) = 248, centre crop
    dict(type='ResizeEdge', scale=248, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
# paper: batch 256 on 8 GPUs = 8 x 32 (official `batch_size: 32` per GPU)
train_dataloader = dict(batch_size=32, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

# paper: AdamW, initial lr 0.0005 for batch 256; official `weight_decay: 0.05`, timm's default
# eps 1e-8 / betas (0.9, 0.999), no weight decay on biases, 1-D parameters (norms) and
# `no_weight_decay()` = pos_embed, cls_token; official `clip_grad: null`
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=5e-4, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)),
    paramwise_cfg=dict(
        _delete_=True,
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        flat_decay_mult=0.0,
        custom_keys={'.cls_token': dict(decay_mult=0.0), '.pos_embed': dict(decay_mult=0.0)},
    ),
)

max_epochs = 300  # paper: 300 epochs (official: 300 + `cooldown_epochs: 10` at min_lr)
warmup_epochs = 5  # official `warmup_epochs: 5` (paper §5.1: 3 warm-up epochs)
param_scheduler = [
    # linear warm-up from the official `warmup_lr: 1e-6` (= 5e-4 * 2e-3), updated every iteration
    dict(
        type='LinearLR', start_factor=1e-6 / 5e-4, by_epoch=True, begin=0, end=warmup_epochs, convert_to_iter_based=True
    ),
    # paper: cosine decay; official `min_lr: 1e-5`
    dict(
        type='CosineAnnealingLR',
        T_max=max_epochs - warmup_epochs,
        eta_min=1e-5,
        by_epoch=True,
        begin=warmup_epochs,
        end=max_epochs,
    ),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)

# official `model_ema: true`, `model_ema_decay: 0.99996` -> mmengine momentum 1 - 0.99996; timm's
# ModelEma averages the whole state dict, BatchNorm statistics of the stem and re-attention included
# official train.py: before every validation, BatchNorm statistics (conv stem, re-attention norms)
# re-estimated as cumulative averages over `--max_iter 50` batches of `--cali_batch_size 256` training
# images read with the evaluation transform; momentum=None stays set afterwards (restore_momentum=False)
custom_hooks = [
    dict(type='EMAHook', momentum=4e-5, update_buffers=True, priority='ABOVE_NORMAL'),
    dict(type='mmvitreg.BNRecalibrationHook', num_batches=50, batch_size=256, restore_momentum=False),
]

# the lr above is for the paper's batch of 256: `--auto-scale-lr` rescales it for other batches
auto_scale_lr = dict(base_batch_size=256)
# a long run: the last 3 checkpoints (to resume) and the best top-1, not one per epoch (~265 MB each)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=3, save_best='auto'))
