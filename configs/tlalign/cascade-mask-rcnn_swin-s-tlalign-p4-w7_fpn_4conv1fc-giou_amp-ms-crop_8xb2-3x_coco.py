# TL-Align Swin-S + Cascade Mask R-CNN 3x on COCO (paper Table 4: AP box 51.9 -> 52.2, AP mask 45.0 -> 45.2): the
# Swin-T config of this folder with Swin-S (drop path 0.2, the official Swin detection configs' value),
# initialised from the TL-Align ImageNet Swin-S run of this folder.
_base_ = './cascade-mask-rcnn_swin-t-tlalign-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco.py'

# the backbone of configs/tlalign/swin-small_16xb64_cutmix-tlalign_in1k.py (its checkpoint, as trained)
checkpoint = 'pretrain/swin-small_16xb64_cutmix-tlalign_in1k.pth'
model = dict(backbone=dict(arch='small', drop_path_rate=0.2, init_cfg=dict(checkpoint=checkpoint)))
