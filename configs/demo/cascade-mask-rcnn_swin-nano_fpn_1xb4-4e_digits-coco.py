# 229 s on 2 cores (train + test, one intra-op thread, 2026-12-07); bbox mAP 0.062, segm mAP 0.066 (chance 0).
# The Cascade Mask R-CNN recipe of the Swin paper (4conv1fc GIoU heads, multi-scale crop, AdamW) with
# mmvitreg.SwinTransformer (configs/swin/cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco.py,
# built on mmdet's ConvNeXt cascade 3x recipe), the model shrunk and the data pointed at the bundled
# COCO-format digits set (`python tools/dataset_converters/digits.py coco --out data`).
# On a CPU the AMP wrapper of the recipe is replaced by fp32 training (tools/train.py says so).
_base_ = '../swin/cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco.py'

num_classes = 10
width = 32  # FPN and head channels (the recipe: 256, with 1024-wide fcs)
model = dict(
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=16, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4]),  # replaces 'tiny'
        window_size=4,
        drop_path_rate=0.1,
        init_cfg=None,
    ),
    neck=dict(in_channels=[16, 32, 64, 128], out_channels=width),
    rpn_head=dict(in_channels=width, feat_channels=width),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=width),
        # a list replaces the inherited one: keep the three cascade stages, shrink them
        bbox_head=[
            dict(head, num_classes=num_classes, in_channels=width, conv_out_channels=width, fc_out_channels=64)
            for head in _base_.model.roi_head.bbox_head
        ],
        mask_roi_extractor=dict(out_channels=width),
        mask_head=dict(num_classes=num_classes, in_channels=width, conv_out_channels=width),
    ),
    # sized for a CPU: the recipe samples 512 RoIs per image and stage from 2,000 proposals for ~3 digits a
    # canvas; 64 RoIs from 100 proposals train the same three stages in a fraction of the time
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=200, max_per_img=100),
        rcnn=[dict(stage, sampler=dict(stage['sampler'], num=64)) for stage in _base_.model.train_cfg.rcnn],
    ),
    test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=100)),
)

data_root = 'data/digits_coco/'
metainfo = dict(classes=tuple(f'digit_{i}' for i in range(num_classes)))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomChoiceResize', scales=[(96, 256), (112, 256), (128, 256), (144, 256)], keep_ratio=True),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(128, 256), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=4,
    num_workers=2,
    dataset=dict(
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_train2017.json',
        data_prefix=dict(img='train2017/'),
        pipeline=train_pipeline,
    ),
)
val_dataloader = dict(
    num_workers=2,
    dataset=dict(
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_val2017.json',
        data_prefix=dict(img='val2017/'),
        pipeline=test_pipeline,
    ),
)
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

# a short schedule: 4 epochs of the 200 canvases (200 iterations), warm-up 50, a 10x step before the last
max_epochs = 4
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
optim_wrapper = dict(optimizer=dict(lr=4e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=50),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[3], gamma=0.1),
]
default_hooks = dict(logger=dict(interval=5), checkpoint=dict(interval=max_epochs, max_keep_ckpts=1))
