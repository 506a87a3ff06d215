# UperNet Swin-L on ADE20K with the DiversePatch Swin-L backbone (ImageNet-22k pre-trained, fine-tuned on 1k at
# 384 with the losses; paper Table 3: 53.1 / 54.5 ms+flip, the state of the art it claims; Swin-L 52.0 / 53.5).
# The Swin-B recipe of this folder with Swin-L (window 12, as the official swin-segmentation config).
_base_ = './upernet_swin-base_8xb2-160k_diversepatch_ade20k-512x512.py'

# the backbone of configs/diversepatch/swin-large_8xb128-30e_diversepatch_in21k-pre_in1k-384px.py
checkpoint_file = 'work_dirs/swin-large_8xb128-30e_diversepatch_in21k-pre_in1k-384px/epoch_30.pth'
model = dict(
    backbone=dict(
        arch='large',
        img_size=384,
        window_size=12,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint_file, prefix='backbone.'),
    ),
    decode_head=dict(in_channels=[192, 384, 768, 1536]),
    auxiliary_head=dict(in_channels=768),
)
