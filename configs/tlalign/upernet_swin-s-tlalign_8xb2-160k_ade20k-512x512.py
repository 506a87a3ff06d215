# TL-Align Swin-S + UperNet on ADE20K (paper Table 3: mIoU 47.6 -> 48.0, multi-scale 49.5 -> 49.7): the Swin-T
# config of this folder with Swin-S, as mmseg's swin-small-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512
# changes its Swin-T recipe (depths 2-2-18-2, the same heads and drop path), initialised from the TL-Align
# ImageNet Swin-S run of this folder.
_base_ = './upernet_swin-t-tlalign_8xb2-160k_ade20k-512x512.py'

# the backbone of configs/tlalign/swin-small_16xb64_cutmix-tlalign_in1k.py (its checkpoint, as trained)
checkpoint = 'pretrain/swin-small_16xb64_cutmix-tlalign_in1k.pth'
model = dict(backbone=dict(arch='small', init_cfg=dict(checkpoint=checkpoint)))
