# ./drloc_swin-t.py starting from ImageNet-1k weights trained without DRLoc (DRLoc §5.3, Table 5):
# mmpretrain's swin-tiny_16xb64_in1k (81.18 top-1); the backbone only (the head is new).
_base_ = './drloc_swin-t.py'

model = dict(
    backbone=dict(
        init_cfg=dict(
            _delete_=True,
            type='Pretrained',
            prefix='backbone',
            checkpoint='https://download.openmmlab.com/mmclassification/v0/swin-transformer/swin_tiny_224_b16x64_300e_imagenet_20210616_090925-66df6be6.pth',
        )
    )
)
