# TL-Align DeiT-S + UperNet on ADE20K (paper Table 3: mIoU 43.8 -> 44.5, multi-scale 45.1 -> 45.7): mmseg's own
# DeiT-S UperNet recipe (vit_deit-s16_mln: multi-level neck, AdamW 6e-5, wd 0.01, 1500-iteration warm-up,
# poly decay, 160k iterations, 8 GPUs x 2 images, 512x512 crops, drop path 0.1) with the backbone replaced by
# mmvitreg.VisionTransformer (DeiT-S) initialised from the TL-Align ImageNet run of this folder. TL-Align is an
# ImageNet pre-training method: downstream training is plain (the paper gives no downstream recipe).
# Single-scale: tools/test.py CONFIG CKPT; multi-scale (0.5-1.75) + flip: tools/test.py CONFIG CKPT --tta.
_base_ = 'mmseg::vit/vit_deit-s16_mln_upernet_8xb2-160k_ade20k-512x512.py'

crop_size = (512, 512)
# the backbone of configs/tlalign/deit-small_8xb128_cutmix-tlalign_in1k.py (its checkpoint, as trained)
checkpoint = 'pretrain/deit-small_8xb128_cutmix-tlalign_in1k.pth'
model = dict(
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
)
# a long run: the last 3 checkpoints (to resume) and the best mIoU, not all ten the library keeps
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3, save_best='mIoU'))
