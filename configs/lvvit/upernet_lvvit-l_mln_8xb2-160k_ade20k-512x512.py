# UperNet + LV-ViT-L on ADE20K (official upernet_lvvit_l_512x512_160k_ade20k.py; README 50.9 mIoU,
# 51.8 ms): out_indices (14, 17, 20, 23) of 24 blocks (0-based), drop path 0.5, UPerHead and FCN head
# channels 512.
# The official L config omits `skip_lam`, so its backbone runs with skip_lam 1.0 although the
# classification lvvit_l it loads was trained with 3.0 (most likely a bug); here the LV-ViT-L preset
# keeps skip_lam 3.0, matching the checkpoint. (The official config also sets img_size 448, which
# only changes the stored position-embedding size.)
_base_ = './upernet_lvvit-s_mln_8xb2-160k_ade20k-512x512.py'

# the checkpoint of configs/lvvit/lvvit-l_8xb64_tl_in1k-448px.py, as trained, or the official LV-ViT-L release (448,
# the only one) converted (python tools/model_converters/lvvit_to_mmvitreg.py lvvit_l-150M-448-86.2.pth.tar
# pretrain/lvvit-l_8xb64_tl_in1k-448px.pth)
checkpoint = 'pretrain/lvvit-l_8xb64_tl_in1k-448px.pth'
embed_dims = 768
model = dict(
    backbone=dict(
        arch='l',
        out_indices=(14, 17, 20, 23),
        drop_path_rate=0.5,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint, prefix='backbone.'),
    ),
    neck=dict(in_channels=[embed_dims] * 4, out_channels=embed_dims),
    decode_head=dict(in_channels=[embed_dims] * 4, channels=512),
    auxiliary_head=dict(in_channels=embed_dims, channels=512),
)
