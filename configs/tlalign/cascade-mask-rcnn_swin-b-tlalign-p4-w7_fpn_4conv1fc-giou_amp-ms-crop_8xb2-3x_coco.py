# TL-Align Swin-B + Cascade Mask R-CNN 3x on COCO (paper Table 4: AP box 51.9 -> 52.3, AP mask 45.0 -> 45.3): the
# Swin-T config of this folder with Swin-B (drop path 0.3, the official Swin detection configs' value; the FPN
# reads its 128-1024 channels), initialised from the TL-Align ImageNet Swin-B fine-tune of this folder.
_base_ = './cascade-mask-rcnn_swin-t-tlalign-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco.py'

# the backbone of configs/tlalign/swin-base_16xb64_cutmix-tlalign-ft40e_in1k.py (its checkpoint, as trained)
checkpoint = 'pretrain/swin-base_16xb64_cutmix-tlalign-ft40e_in1k.pth'
model = dict(
    backbone=dict(arch='base', drop_path_rate=0.3, init_cfg=dict(checkpoint=checkpoint)),
    neck=dict(in_channels=[128, 256, 512, 1024]),
)
