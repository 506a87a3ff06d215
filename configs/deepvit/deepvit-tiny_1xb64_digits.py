# DeepViT on the bundled digits: the DeepViT-S recipe of this folder (AdamW, no decay on norms / biases /
# cls_token / pos_embed, Mixup + CutMix, label smoothing 0.1) with a tiny re-attention ViT at 32x32:
# 96-dim, 4 blocks, 3 heads, MLP ratio 3 (the presets' ratio), re-attention with the official BatchNorm
# in the last 2 blocks (as DeepViT-S keeps MHSA in its first blocks), 4-pixel tokens (8x8 grid).
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = [
    '../_base_/models/deepvit.py',
    '../_base_/datasets/digits_imagenet.py',
    '../_base_/schedules/digits_adamw_30e.py',
    'mmpretrain::_base_/default_runtime.py',
]

num_classes = 10
model = dict(
    backbone=dict(
        arch=dict(
            _delete_=True,
            embed_dims=96,
            num_layers=4,
            num_heads=3,
            feedforward_channels=288,
            attn_types=['msa', 'msa', 'reattn', 'reattn'],
        ),
        img_size=32,
        patch_size=4,
        drop_path_rate=0.1,
    ),
    head=dict(num_classes=num_classes, in_channels=96),
    # official `mixup: 0.8`, `cutmix: 1.0`, one of the two per batch (deepvit_8xb32_in1k_recipe.py)
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
)
data_preprocessor = dict(num_classes=num_classes)
train_dataloader = dict(batch_size=64)
val_dataloader = dict(batch_size=128)
test_dataloader = val_dataloader

# a checkpoint every 10 epochs (the schedule: ../_base_/schedules/digits_adamw_30e.py)
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=10, max_keep_ckpts=1, save_best='auto'))
