# UperNet DeiT-S (mmseg's multi-level neck) on ADE20K with DiversePatch's patch-wise contrastive and cosine losses
# during segmentation training. Beyond the paper: the paper fine-tunes backbones pre-trained with its losses and
# trains segmentation without them (official issue #4); no official code has the cosine loss; no published number.
# The recipe is mmseg's own DeiT-S UperNet one (vit_deit-s16_mln: multi-level neck, AdamW 6e-5, wd 0.01, 1500
# warm-up iterations, poly, 160k iterations, 8 GPUs x 2 images, 512x512 crops, drop path 0.1); the backbone is
# mmvitreg.VisionTransformer (DeiT-S, mmpretrain's ImageNet-1k weights), which carries the token trace, and the
# model's type is mmvitreg.TokenSegmentor (mmseg's EncoderDecoder with `aux_losses`).
# The paper forms on the 32x32 patch grid of a 512x512 crop: the contrastive loss anchors each last-block patch on
# its first-block self (alpha_2 = 1, paper and official), the cosine loss reads the last block's patches (alpha_1 =
# 1, paper; untuned there). The mixing loss needs an image-level label and is refused by a segmentor.
# Baseline: --cfg-options model.aux_losses=[]
_base_ = 'mmseg::vit/vit_deit-s16_mln_upernet_8xb2-160k_ade20k-512x512.py'

crop_size = (512, 512)
# mmpretrain's DeiT-S release, the checkpoint of its config mmpretrain::deit/deit-small_4xb256_in1k.py
checkpoint = 'https://download.openmmlab.com/mmclassification/v0/deit/deit-small_pt-4xb256_in1k_20220218-9425b9bb.pth'  # noqa
model = dict(
    type='mmvitreg.TokenSegmentor',
    pretrained=None,  # mmseg's `pretrained` is for its own ViT; ours loads through init_cfg
    backbone=dict(
        _delete_=True,
        type='mmvitreg.VisionTransformer',
        arch='deit-small',
        img_size=crop_size,
        out_type='featmap',
        out_indices=(2, 5, 8, 11),  # mmseg's ViT UperNet taps
        final_norm=False,  # as the base's `mln` (no final norm; the `-ln` variants add it)
        drop_path_rate=0.1,  # the base's DeiT-S value
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint, prefix='backbone.'),
    ),
    aux_losses=[
        dict(type='mmvitreg.PatchContrastiveLoss', loss_weight=1.0, form='paper'),
        dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0),
    ],
)
# a long run: the last 3 checkpoints (to resume) and the best mIoU, not all ten the library keeps
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3, save_best='mIoU'))
