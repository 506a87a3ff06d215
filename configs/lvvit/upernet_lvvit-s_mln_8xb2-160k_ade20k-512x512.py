# UperNet + LV-ViT-S on ADE20K, 512x512, 160k iterations: official
# seg/configs/lvvit/upernet_lvvit_s_512x512_160k_ade20k.py (README: 47.9 mIoU, 48.6 ms).
# Inherits mmseg's own ViT UperNet recipe (AdamW 6e-5, wd 0.01, 1500-iter linear warm-up + poly,
# 160k iterations, 8 GPUs x 2 images): the official numbers are the same. The official backbone
# turns its 4 stride-16 outputs into 4 scales with its own "side layers"; here mmseg's
# MultiLevelNeck (x4, x2, x1, x0.5) does that, as in mmseg's ViT recipe.
_base_ = 'mmseg::vit/vit_vit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py'

# the checkpoint of configs/lvvit/lvvit-s_8xb128_tl_in1k.py, as trained, or the official LV-ViT-S release converted
# (python tools/model_converters/lvvit_to_mmvitreg.py lvvit_s-26M-224-83.3.pth.tar pretrain/lvvit-s_8xb128_tl_in1k.pth)
checkpoint = 'pretrain/lvvit-s_8xb128_tl_in1k.pth'
embed_dims = 384
model = dict(
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='mmvitreg.LVViT',
        arch='s',
        img_size=512,
        out_type='featmap',
        # official out_indices, 0-based in the official backbone (`for i, blk in enumerate(blocks)`),
        # as in mmseg / mmpretrain: blocks 7, 10, 13, 16 of 16
        out_indices=(6, 9, 12, 15),
        final_norm=False,  # the official seg backbone has no final norm
        # official drop_path_rate 0.1; the official seg backbone actually feeds this rate to the MLP
        # dropout (`Block(drop=dpr[i])`) and leaves drop path at 0; here it is stochastic depth, as
        # named. LN eps stays the classification 1e-5 (official seg: 1e-6).
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint, prefix='backbone.'),
    ),
    neck=dict(in_channels=[embed_dims] * 4, out_channels=embed_dims, scales=[4, 2, 1, 0.5]),
    decode_head=dict(in_channels=[embed_dims] * 4, channels=256, num_classes=150),  # official channels 256
    auxiliary_head=dict(in_channels=embed_dims, in_index=2, num_classes=150),  # official FCN head on output 2
    # official slide test: 512 crops, stride 341
    test_cfg=dict(mode='slide', crop_size=(512, 512), stride=(341, 341)),
)
# a long run: the last 3 checkpoints (to resume) and the best mIoU, not all ten the library keeps
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3, save_best='mIoU'))
