# Cascade Mask R-CNN Swin-T 3x on COCO with DRLoc regularising the backbone during detection training. Beyond the
# paper: DRLoc is trained only in image classification by its paper and code (official issue #7); no published
# number. The recipe is the Swin paper's (configs/swin/cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_
# 8xb2-3x_coco.py: 4conv1fc GIoU heads, multi-scale 480-800 crop training, AdamW 1e-4, wd 0.05, 36 epochs, AMP,
# 8 GPUs x 2 images); only the model's type changes, CascadeRCNN -> mmvitreg.TokenCascadeRCNN (mmdet's detector
# with `aux_losses`). DRLoc as the official Swin runs: the last stage's tokens before the norm (about 25x42 for an
# 800x1333 image; the grid changes with each batch's size), l1 on raw |Δ|, mean over B·m·2, endpoints with
# replacement, m = 64, λ = 0.5, trunc-normal MLP init. Baseline: --cfg-options model.aux_losses=[]
_base_ = '../swin/cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco.py'

model = dict(
    type='mmvitreg.TokenCascadeRCNN',
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=768,
            layers=(-1,),
            num_pairs=64,
            loss_weight=0.5,
            target='abs',
            reduction='mean',
            replacement=True,
            init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
        )
    ],
)
