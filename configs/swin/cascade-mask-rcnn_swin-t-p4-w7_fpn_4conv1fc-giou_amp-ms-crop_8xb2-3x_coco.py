# Cascade Mask R-CNN with Swin-T, the recipe of the Swin paper (Table 2: 4conv1fc GIoU heads, multi-scale
# 480-800 crop training, AdamW 1e-4, wd 0.05, 3x = 36 epochs with steps at 27 and 33, drop path 0.2,
# mixed precision). mmdet 3.3.0 ships this recipe only for ConvNeXt, so this config inherits it and swaps
# in mmvitreg.SwinTransformer (which carries the token trace) and the Swin optimizer settings of mmdet's
# swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py (no decay on position tables and norms) in place of the
# ConvNeXt-only layer-decay constructor. On a CPU the AMP wrapper trains in fp32 (tools/train.py says so).
_base_ = 'mmdet::convnext/cascade-mask-rcnn_convnext-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop-3x_coco.py'

checkpoint_file = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/swin/swin_tiny_patch4_window7_224_20220317-1cdeb081.pth'  # noqa
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitreg.SwinTransformer',
        arch='tiny',
        img_size=224,
        window_size=7,
        drop_path_rate=0.2,  # the Swin detection release's Swin-T value
        out_indices=(0, 1, 2, 3),
        pad_small_map=True,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint_file),
    ),
    neck=dict(in_channels=[96, 192, 384, 768]),
)

optim_wrapper = dict(
    _delete_=True,
    type='AmpOptimWrapper',
    paramwise_cfg=dict(
        custom_keys={
            'absolute_pos_embed': dict(decay_mult=0.0),
            'relative_position_bias_table': dict(decay_mult=0.0),
            'norm': dict(decay_mult=0.0),
        }
    ),
    optimizer=dict(type='AdamW', lr=0.0001, betas=(0.9, 0.999), weight_decay=0.05),
)
# a long run: the last 3 checkpoints (to resume) and the best box mAP, not one per epoch (the library keeps all 36)
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3, save_best='coco/bbox_mAP'))
