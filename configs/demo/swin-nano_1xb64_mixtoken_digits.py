# 129 s on 2 cores (train + test, one intra-op thread, 2026-12-07); top-1 91.92 (chance 10).
# mmpretrain's own Swin-T ImageNet recipe (swin_transformer/swin-tiny_16xb64_in1k.py: AdamW, wd 0.05,
# no decay on norms, biases and the position-bias tables, label smoothing 0.1, cosine, grad clip 5) on the
# bundled digits set, with mmvitreg.SwinTransformer shrunk for 32x32 inputs and mmpretrain's image-level
# Mixup/CutMix replaced by a trace user: MixToken on the 8x8 patch-token grid (tokens mixed after the
# patch embedding, targets mixed by the token share: LV-ViT Eq. 8-10).
# Data: `python tools/dataset_converters/digits.py imagenet --out data`.
_base_ = [
    'mmpretrain::_base_/models/swin_transformer/tiny_224.py',
    '../_base_/datasets/digits_imagenet.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
]

num_classes = 10
patch_size = 4  # Swin's patch embedding: an 8x8 token grid at 32x32
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(
        type='mmvitreg.SwinTransformer',
        arch=dict(_delete_=True, embed_dims=32, depths=[2, 2], num_heads=[2, 4]),  # replaces 'tiny'
        img_size=32,
        window_size=4,
        out_indices=(1,),
        drop_path_rate=0.1,
    ),
    head=dict(num_classes=num_classes, in_channels=64),
    train_cfg=dict(_delete_=True, mix=dict(type='mmvitreg.MixToken', alpha=1.0, patch_size=patch_size)),
)

train_dataloader = dict(batch_size=64)
val_dataloader = dict(batch_size=128)
test_dataloader = val_dataloader

# a short schedule: 30 epochs of ~1500 images, 2 warm-up epochs (the recipe: 300 and 20)
max_epochs = 30
train_cfg = dict(max_epochs=max_epochs, val_interval=10)
optim_wrapper = dict(optimizer=dict(lr=1e-3), clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=2, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=2, end=max_epochs),
]
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=10, max_keep_ckpts=1, save_best='auto'))
auto_scale_lr = dict(base_batch_size=64)
