# TL-Align Swin-B + Cascade Mask R-CNN 3x on COCO (paper Table 4: AP box 51.9 -> 52.3, AP mask 45.0 -> 45.3): the Swin
# detection recipe of configs/swin (mmdet's ConvNeXt cascade 3x: 4conv1fc GIoU heads, multi-scale 480-800 crop
# training, AdamW 1e-4, wd 0.05, 36 epochs, steps at 27 and 33, AMP, 8 GPUs x 2 images; Swin optimizer
# settings) with mmvitreg.SwinTransformer (Swin-B) initialised from the TL-Align ImageNet run of this folder.
# TL-Align is an ImageNet pre-training method: downstream training is plain (the paper gives no recipe).
_base_ = '../swin/cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco.py'

# the backbone of configs/tlalign/swin-base_16xb64_cutmix-tlalign-ft40e_in1k.py (its checkpoint, as trained)
checkpoint = 'pretrain/swin-base_16xb64_cutmix-tlalign-ft40e_in1k.pth'
model = dict(
    backbone=dict(
        arch='base',
        drop_path_rate=0.3,  # the official Swin detection configs' Swin-B value
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint, prefix='backbone.')),
    neck=dict(in_channels=[128, 256, 512, 1024]))
