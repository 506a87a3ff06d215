# TL-Align Swin-T + UperNet on ADE20K (paper Table 3: mIoU 44.4 -> 44.7, multi-scale 45.8 -> 46.5): mmseg's own
# Swin-T UperNet recipe with mmvitreg.SwinTransformer (configs/swin: AdamW 6e-5, wd 0.01, no decay on position
# tables and norms, 1500-iteration warm-up, poly, 160k iterations, 8 GPUs x 2 images, 512x512 crops, drop path
# 0.3), initialised from the TL-Align ImageNet run of this folder. TL-Align is an ImageNet pre-training method:
# downstream training is plain (the paper gives no downstream recipe).
# Single-scale: tools/test.py CONFIG CKPT; multi-scale (0.5-1.75) + flip: tools/test.py CONFIG CKPT --tta.
_base_ = '../swin/upernet_swin-t_8xb2-160k_ade20k-512x512.py'

# the backbone of configs/tlalign/swin-tiny_16xb64_cutmix-tlalign_in1k.py (its checkpoint, as trained)
checkpoint = 'pretrain/swin-tiny_16xb64_cutmix-tlalign_in1k.pth'
model = dict(backbone=dict(init_cfg=dict(type='Pretrained', checkpoint=checkpoint, prefix='backbone.')))
