# mmseg's own Swin-T UperNet ADE20K recipe (swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512:
# AdamW 6e-5, wd 0.01, no decay on position tables and norms, 1500 linear warm-up iterations then poly,
# 160k iterations, 8 GPUs x 2 images, multi-scale 0.5-1.75 + flip evaluation with `tools/test.py --tta`)
# with its backbone replaced by mmvitreg.SwinTransformer, which carries the token trace. Same weights,
# same features: the ImageNet-1k Swin-T weights mmseg converted from the official release load as they are.
_base_ = 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'

checkpoint_file = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/swin/swin_tiny_patch4_window7_224_20220317-1cdeb081.pth'  # noqa
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitreg.SwinTransformer',
        arch='tiny',
        img_size=224,
        window_size=7,
        drop_path_rate=0.3,  # mmseg's Swin-T value
        out_indices=(0, 1, 2, 3),
        pad_small_map=True,  # mmseg's Swin pads every map to whole windows and always shifts
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint_file),
    )
)
# a long run: the last 3 checkpoints (to resume) and the best mIoU, not all ten the library keeps
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3, save_best='mIoU'))
