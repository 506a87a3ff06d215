# 241 s on 2 cores (train + test, one intra-op thread, 2026-12-07); bbox mAP 0.076, segm mAP 0.076 (chance 0).
# The digits Cascade Mask R-CNN Swin-nano (cascade-mask-rcnn_swin-nano_fpn_1xb4-4e_digits-coco.py) with DRLoc
# regularising the backbone: the model's type is mmvitreg.TokenCascadeRCNN (mmdet's CascadeRCNN with trace
# users), nothing else of the model changes. DRLoc reads the last block's token map (3x3 to 5x5 here, 128
# channels) with the paper's lambda for Swin (0.5) and the official mean reduction (the paper's sum over the
# images scales with the per-GPU batch).
_base_ = './cascade-mask-rcnn_swin-nano_fpn_1xb4-4e_digits-coco.py'

model = dict(
    type='mmvitreg.TokenCascadeRCNN',
    aux_losses=[dict(type='mmvitreg.DRLoc', in_channels=128, layers=(-1,), loss_weight=0.5, reduction='mean')],
)
