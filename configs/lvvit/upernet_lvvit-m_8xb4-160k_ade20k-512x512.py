# UperNet + LV-ViT-M on ADE20K with the official side layers (official
# upernet_lvvit_m_512x512_160k_ade20k.py; README 49.4 mIoU, 50.6 ms): the M backbone of
# upernet_lvvit-m_mln_8xb2-160k_ade20k-512x512.py, the neck and batch of the S side-layer config.
_base_ = './upernet_lvvit-m_mln_8xb2-160k_ade20k-512x512.py'

embed_dims = 512
side_channels = 2048
model = dict(
    neck=dict(
        _delete_=True,
        type='mmvitreg.LVViTSideNeck',
        in_channels=embed_dims,
        out_channels=side_channels,
        norm_cfg=dict(type='SyncBN', requires_grad=True),
    ),
    decode_head=dict(in_channels=[embed_dims] * 3 + [side_channels]),
)
train_dataloader = dict(batch_size=4)  # official samples_per_gpu=4 (inherited from mmseg 0.x ade20k.py)
