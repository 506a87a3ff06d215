# UperNet Swin-L on Cityscapes with the DiversePatch Swin-L backbone (paper Table 4: 82.7 / 83.6 ms+flip, the
# state of the art it claims; Swin-L 82.3 / 83.1): the Cityscapes Swin-B recipe of this folder with Swin-L.
_base_ = './upernet_swin-base_8xb2-80k_diversepatch_cityscapes-769x769.py'

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
