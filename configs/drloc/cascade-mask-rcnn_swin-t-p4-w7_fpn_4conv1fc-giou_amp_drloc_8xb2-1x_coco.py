# Cascade Mask R-CNN Swin-T + DRLoc (cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_drloc_8xb2-3x_coco.py)
# on mmdet's 1x Swin schedule and data (swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py: 12 epochs, 1000 linear warm-up
# iterations, steps at epochs 8 and 11; single-scale 1333x800 training with flips, mmdet's coco_instance pipeline).
# The same model, heads, AdamW 1e-4 / wd 0.05 and AMP as the 3x config. Beyond the paper (no published number).
# Baseline: --cfg-options model.aux_losses=[]
_base_ = './cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_drloc_8xb2-3x_coco.py'

# mmdet's _base_/datasets/coco_instance.py
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

# mmdet's swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py
max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[8, 11], gamma=0.1),
]
