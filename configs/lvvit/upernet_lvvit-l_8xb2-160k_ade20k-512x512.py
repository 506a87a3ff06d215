# UperNet + LV-ViT-L on ADE20K with the official side layers (official
# upernet_lvvit_l_512x512_160k_ade20k.py; README 50.9 mIoU, 51.8 ms): the L backbone of
# upernet_lvvit-l_mln_8xb2-160k_ade20k-512x512.py, UPerHead and FCN head channels 512, and the
# official `data=dict(samples_per_gpu=2)`.
_base_ = './upernet_lvvit-l_mln_8xb2-160k_ade20k-512x512.py'

embed_dims = 768
side_channels = 2048
model = dict(
    neck=dict(
        _delete_=True,
        type='mmvitreg.LVViTSideNeck',
        in_channels=embed_dims,
        out_channels=side_channels,
        norm_cfg=dict(type='SyncBN', requires_grad=True),
    ),
    decode_head=dict(in_channels=[embed_dims] * 3 + [side_channels], channels=512),
    auxiliary_head=dict(channels=512),
)  # official FCNHead channels 512 for L
train_dataloader = dict(batch_size=2)  # official samples_per_gpu=2
