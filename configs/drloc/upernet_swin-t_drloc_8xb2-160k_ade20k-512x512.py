# UperNet Swin-T on ADE20K with DRLoc regularising the backbone during segmentation training. Beyond the paper: the
# DRLoc paper and code train DRLoc only in image classification (official issue #7: their Swin-T segmentation run
# used a backbone pre-trained with DRLoc, no DRLoc loss while segmenting); no published number.
# The recipe is mmseg's own Swin-T UperNet ADE20K one (configs/swin/upernet_swin-t_8xb2-160k_ade20k-512x512.py:
# AdamW 6e-5, poly, 160k iterations, 8 GPUs x 2 images, 512x512 crops); only the model's type changes to
# mmvitreg.TokenSegmentor, which adds `aux_losses` to mmseg's EncoderDecoder.
# DRLoc as the official Swin runs (train.sh): the last stage's tokens before the backbone's norm (16x16 at 512x512,
# 768 channels), l1 on raw |Δ|, the mean over B·m·2 (the paper's sum over the images would grow with the 2 images
# per GPU), endpoints drawn with replacement, m = 64 pairs per image, λ = 0.5 (paper and official, for Swin), the
# MLP initialised as the official Swin does (trunc normal 0.02). λ is fixed: the official warm-up/decay is laid out
# in epochs of an image-classification run. Baseline: --cfg-options model.aux_losses=[]
_base_ = '../swin/upernet_swin-t_8xb2-160k_ade20k-512x512.py'

model = dict(
    type='mmvitreg.TokenSegmentor',
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
