# TL-Align Swin-T + Cascade Mask R-CNN 3x on COCO (paper Table 4: AP box 50.4 -> 50.5, AP mask 43.7 -> 43.8): the
# Swin detection recipe of configs/swin (mmdet's ConvNeXt cascade 3x: 4conv1fc GIoU heads, multi-scale 480-800
# crop training, AdamW 1e-4, wd 0.05, 36 epochs, steps at 27 and 33, AMP, 8 GPUs x 2 images; Swin optimizer
# settings; drop path 0.2) with mmvitreg.SwinTransformer initialised from the TL-Align ImageNet run of this
# folder. TL-Align is an ImageNet pre-training method: downstream training is plain (no recipe in the paper).
_base_ = '../swin/cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco.py'

# the backbone of configs/tlalign/swin-tiny_16xb64_cutmix-tlalign_in1k.py (its checkpoint, as trained)
checkpoint = 'pretrain/swin-tiny_16xb64_cutmix-tlalign_in1k.pth'
model = dict(backbone=dict(init_cfg=dict(type='Pretrained', checkpoint=checkpoint, prefix='backbone.')))
