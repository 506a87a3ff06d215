# DeepViT-S + UperNet on ADE20K: mmseg's own plain-ViT UperNet recipe (multi-level neck, AdamW
# 6e-5, 1500-iteration warm-up, poly decay, 160k iterations, 8 GPUs x 2 images, 512x512 crops)
# with the backbone replaced by DeepViT-S. The DeepViT paper reports no segmentation result; this is
# the standard downstream protocol of mmseg's ViT/DeiT configs, applied to DeepViT.
_base_ = 'mmseg::vit/vit_vit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py'

crop_size = (512, 512)
embed_dims = 396  # DeepViT-S
# the checkpoint of configs/deepvit/deepvit-s_8xb32_in1k.py, as trained, or the official DeepViT-S release converted
# (python tools/model_converters/deepvit_to_mmvitreg.py SRC pretrain/deepvit-s_8xb32_in1k.pth)
checkpoint = 'pretrain/deepvit-s_8xb32_in1k.pth'

# DeepViT is pre-trained with mean = std = 0.5 (official default_cfg), not the ImageNet statistics
data_preprocessor = dict(size=crop_size, mean=[127.5, 127.5, 127.5], std=[127.5, 127.5, 127.5])
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,  # mmseg's `pretrained` is for its own ViT; ours loads through init_cfg
    backbone=dict(
        _delete_=True,
        type='mmvitreg.DeepViT',
        arch='s',
        img_size=crop_size,
        # a feature map from the end of every 4th of the 16 blocks, as mmseg's (2, 5, 8, 11) for 12
        out_type='featmap',
        out_indices=(3, 7, 11, 15),
        final_norm=False,  # as the base's `vit-b16_mln` (no final norm; the `-ln` variants add it)
        drop_path_rate=0.1,  # as mmseg's DeiT-S UperNet config
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint, prefix='backbone.'),
    ),
    neck=dict(in_channels=[embed_dims] * 4, out_channels=embed_dims),
    decode_head=dict(in_channels=[embed_dims] * 4, num_classes=150),
    auxiliary_head=dict(in_channels=embed_dims, num_classes=150),
)
# a long run: the last 3 checkpoints (to resume) and the best mIoU, not all ten the library keeps
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3, save_best='mIoU'))
