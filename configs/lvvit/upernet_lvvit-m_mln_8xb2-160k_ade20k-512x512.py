# UperNet + LV-ViT-M on ADE20K (official upernet_lvvit_m_512x512_160k_ade20k.py; README 49.4 mIoU,
# 50.6 ms): out_indices (10, 13, 16, 19) of 20 blocks (0-based), drop path 0.2, UPerHead channels 256.
_base_ = './upernet_lvvit-s_mln_8xb2-160k_ade20k-512x512.py'

# the checkpoint of configs/lvvit/lvvit-m_8xb128_tl_in1k.py, as trained, or the official LV-ViT-M release converted
# (python tools/model_converters/lvvit_to_mmvitreg.py lvvit_m-56M-224-84.0.pth.tar pretrain/lvvit-m_8xb128_tl_in1k.pth)
checkpoint = 'pretrain/lvvit-m_8xb128_tl_in1k.pth'
embed_dims = 512
model = dict(
    backbone=dict(
        arch='m',
        out_indices=(10, 13, 16, 19),
        drop_path_rate=0.2,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint, prefix='backbone.'),
    ),
    neck=dict(in_channels=[embed_dims] * 4, out_channels=embed_dims),
    decode_head=dict(in_channels=[embed_dims] * 4),
    auxiliary_head=dict(in_channels=embed_dims),
)
