# UperNet Swin-T on Cityscapes with DiversePatch's patch-wise cosine loss during segmentation training (as
# upernet_swin-t_patch-cos_8xb2-160k_ade20k-512x512.py; beyond the paper, no published number). mmseg has no Swin
# Cityscapes config: this one is put together from mmseg's own parts as its Swin ADE20K config is (the UperNet
# Swin model, default runtime) with mmseg's Cityscapes 769x769 data and 80k schedule and the settings of its
# UperNet Cityscapes 769x769 configs (align_corners, sliding-window test), the Swin-T optimizer and warm-up/poly
# learning rate of mmseg's Swin-T ADE20K recipe (AdamW 6e-5, wd 0.01) ending at 80k, 8 GPUs x 2 images, and
# mmvitreg.SwinTransformer (configs/swin). Cosine loss alpha_1 = 1 on the last stage's tokens (24x24 at 769x769).
# Baseline: --cfg-options model.aux_losses=[]
_base_ = [
    'mmseg::_base_/models/upernet_swin.py',
    'mmseg::_base_/datasets/cityscapes_769x769.py',
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_80k.py',
]

crop_size = (769, 769)
data_preprocessor = dict(size=crop_size)
checkpoint_file = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/swin/swin_tiny_patch4_window7_224_20220317-1cdeb081.pth'  # noqa
model = dict(
    type='mmvitreg.TokenSegmentor',
    data_preprocessor=data_preprocessor,
    backbone=dict(
        _delete_=True,
        type='mmvitreg.SwinTransformer',
        arch='tiny',
        img_size=224,
        window_size=7,
        drop_path_rate=0.3,  # mmseg's Swin-T value
        out_indices=(0, 1, 2, 3),
        pad_small_map=True,  # mmseg's Swin pads every map to whole windows and always shifts
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint_file),
    ),
    decode_head=dict(in_channels=[96, 192, 384, 768], num_classes=19, align_corners=True),
    auxiliary_head=dict(in_channels=384, num_classes=19, align_corners=True),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(513, 513)),
    aux_losses=[dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0)],
)

# mmseg's swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py, on 80k iterations
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=0.00006, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(
        custom_keys={
            'absolute_pos_embed': dict(decay_mult=0.0),
            'relative_position_bias_table': dict(decay_mult=0.0),
            'norm': dict(decay_mult=0.0),
        }
    ),
)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=80000, by_epoch=False),
]
train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
# a long run: the last 3 checkpoints (to resume) and the best mIoU, not all ten the library keeps
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3, save_best='mIoU'))
