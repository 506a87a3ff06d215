# UperNet + LV-ViT-S on ADE20K, 512x512, 160k iterations, as the official
# seg/configs/lvvit/upernet_lvvit_s_512x512_160k_ade20k.py (README: 47.9 mIoU, 48.6 ms): the official
# side layers (mmvitreg.LVViTSideNeck) turn the 4 stride-16 outputs into strides 4, 8, 16, 16, the
# last projected to 2048 channels, and the official config inherits mmseg 0.x's ADE20K data set with
# 4 images per GPU (8 x 4 = 32). Everything else as the MultiLevelNeck variant
# (upernet_lvvit-s_mln_8xb2-160k_ade20k-512x512.py), whose recipe numbers equal the official ones.
_base_ = './upernet_lvvit-s_mln_8xb2-160k_ade20k-512x512.py'

embed_dims = 384
side_channels = 2048  # official `out_channels=2048` of the last side layer
model = dict(
    neck=dict(
        _delete_=True,
        type='mmvitreg.LVViTSideNeck',
        in_channels=embed_dims,
        out_channels=side_channels,
        norm_cfg=dict(type='SyncBN', requires_grad=True),
    ),  # official nn.SyncBatchNorm
    decode_head=dict(in_channels=[embed_dims] * 3 + [side_channels]),
)
train_dataloader = dict(batch_size=4)  # official samples_per_gpu=4 (mmseg 0.x ade20k.py)
