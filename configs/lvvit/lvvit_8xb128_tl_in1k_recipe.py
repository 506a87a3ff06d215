# The LV-ViT token-labeling ImageNet-1k recipe, shared by the presets in this folder (they change
# only arch, drop path and, for L, lr/RandAugment). "paper" = token labeling Table 2 / §4.1
# (https://arxiv.org/abs/2104.10858); "official" = zihangJiang/TokenLabeling main.py + README.
# The recipe is the official training command (the run behind the published numbers); where the
# paper's text differs, the comment names the paper's value. The paper's loss is one override away:
#   --cfg-options model.head.beta=0.5 model.head.cls_target=gt
_base_ = [
    '../_base_/models/lvvit_tl.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
]

# Dense label maps of the teacher (official NFNet-F6 top-5 maps, read unchanged; or maps written
# by tools/generate_label_maps.py), one `<class_dir>/<image>.pt` per training image, packed once into
# a memory-mapped store (the data pipeline's overhead: 3% instead of 7%):
#   python tools/dataset_converters/pack_label_maps.py data/imagenet/label_top5_train_nfnet \
#       data/imagenet/label_top5_train_nfnet_packed
# label_root may also name the folder of .pt files itself.
label_root = 'data/imagenet/label_top5_train_nfnet_packed'
token_label_size = 14  # official --token-label-size 14: the 14x14 token grid at 224 px / 16
img_size = 224

# official TokenLabelCrossEntropy(dense_weight=1.0, cls_weight=1.0), no --ground-truth: the class
# token learns the ReLabel target of the crop, both targets smoothed as get_labelmaps_with_coords does
model = dict(
    head=dict(
        beta=1.0,  # official --dense-weight 1.0 (paper Eq. 7: beta = 0.5)
        cls_target='relabel',  # official (paper: the image label, 'gt'; --ground-truth: 'relabel_gt')
        label_smooth_form='official',
    )
)  # on = 1 - s + s / C, off = s / C on soft targets

# ImageNet mean/std (official default_cfgs), RGB
data_preprocessor = dict(num_classes=1000, mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
bgr_mean = [103.53, 116.28, 123.675]
bgr_std = [57.375, 57.12, 58.395]

# Geometry-aware transforms move the label map with the image. Order as the official
# ComposeWithLabel: flip, RandAugment, then the random resized crop.
train_pipeline = [
    dict(type='LoadImageFromFile'),
    # num_classes: each map's class indices are checked as it is read (a foreign map fails naming its file)
    dict(type='mmvitreg.LoadTokenLabelMap', label_root=label_root, num_classes=1000),
    dict(type='mmvitreg.RandomFlipWithLabelMap', prob=0.5, direction='horizontal'),  # official hflip 0.5
    # paper RandAug 9/0.5 (official rand-m9-mstd0.5-inc1): 2 ops, magnitude 9 of 10, std 0.5
    dict(
        type='mmvitreg.RandAugmentWithLabelMap',
        policies='timm_increasing',
        num_policies=2,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(pad_val=[round(x) for x in bgr_mean], interpolation='bicubic'),
    ),
    # official RandomResizedCrop scale (0.08, 1), ratio (3/4, 4/3); official interpolation 'random'
    # (bilinear or bicubic) is bicubic here
    dict(type='mmvitreg.RandomResizedCropWithLabelMap', scale=img_size, backend='pillow', interpolation='bicubic'),
    # paper erasing prob 0.25 (official --reprob 0.25 --remode pixel); not reflected in the labels
    # (as the official code)
    dict(
        type='RandomErasing',
        erase_prob=0.25,
        mode='rand',
        min_area_ratio=0.02,
        max_area_ratio=1 / 3,
        fill_color=bgr_mean,
        fill_std=bgr_std,
    ),
    # official targets: the stored top-5 logits in a 1000-class map of zeros, roi_align on the crop
    # (14 x 14 tokens, 1 x 1 ReLabel class target), softmax over all 1000 classes
    dict(type='mmvitreg.TokenLabelTarget', token_label_size=token_label_size, reading='official', num_classes=1000),
    dict(type='PackInputs', algorithm_keys=['token_label_map']),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    # official default_cfgs crop_pct 0.9 (T/S): short edge floor(224 / 0.9) = 248, centre crop 224;
    # M/L override this with crop_pct 1.0
    dict(type='ResizeEdge', scale=248, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=img_size),
    dict(type='PackInputs'),
]
# paper: batch 1024 = 8 GPUs x 128 (official README 8-GPU command -b 128)
train_dataloader = dict(batch_size=128, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=128, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

# paper Table 2 (token labeling): AdamW, lr = 1e-3 * batch / 640 = 1.6e-3 at 1024 (the official
# --lr 1.6e-3 default, not auto-scaled), weight decay 0.05; timm's optimizer factory: no decay on
# biases and 1-D parameters (norms), nor on cls_token / pos_embed (official no_weight_decay)
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3 * 1024 / 640, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        flat_decay_mult=0.0,
        custom_keys={'.cls_token': dict(decay_mult=0.0), '.pos_embed': dict(decay_mult=0.0)},
    ),
)
# official: cosine over 300 epochs (--epochs 300) to --min-lr 1e-5, 5 warm-up epochs from 1e-6, then
# --cooldown-epochs 10 at the min lr: 310 epochs (paper: 300 epochs, 5 warm-up)
cosine_epochs = 300
max_epochs = cosine_epochs + 10
warmup_epochs = 5
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-6 / (1e-3 * 1024 / 640),
        by_epoch=True,
        end=warmup_epochs,
        convert_to_iter_based=True,
    ),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs, end=cosine_epochs),
    # cool-down: no scheduler runs, the lr stays at the cosine's last value, 1e-5
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
auto_scale_lr = dict(base_batch_size=1024)

# official --model-ema, decay 0.99992 per step: mmengine momentum = 1 - decay; timm's ModelEmaV2
# averages the whole state dict, buffers included
custom_hooks = [dict(type='EMAHook', momentum=8e-5, update_buffers=True, priority='ABOVE_NORMAL')]
# a long run: the last 3 checkpoints (to resume) and the best top-1, not one per epoch (~265 MB each)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=3, save_best='auto'))
