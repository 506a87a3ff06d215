# TL-Align Swin-B + UperNet on ADE20K (paper Table 3: mIoU 48.1 -> 48.3, multi-scale 49.7 -> 50.1): the Swin-T
# config of this folder with Swin-B, as mmseg's swin-base-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512
# changes its Swin-T recipe (128 channels, depths 2-2-18-2, heads 4-8-16-32, the heads' input channels),
# initialised from the TL-Align ImageNet Swin-B fine-tune of this folder.
_base_ = './upernet_swin-t-tlalign_8xb2-160k_ade20k-512x512.py'

# the backbone of configs/tlalign/swin-base_16xb64_cutmix-tlalign-ft40e_in1k.py (its checkpoint, as trained)
checkpoint = 'pretrain/swin-base_16xb64_cutmix-tlalign-ft40e_in1k.pth'
model = dict(
    backbone=dict(arch='base', init_cfg=dict(checkpoint=checkpoint)),
    decode_head=dict(in_channels=[128, 256, 512, 1024]),
    auxiliary_head=dict(in_channels=512),
)
