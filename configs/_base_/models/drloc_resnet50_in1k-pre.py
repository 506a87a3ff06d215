# ./drloc_resnet50.py starting from ImageNet-1k weights trained without DRLoc (DRLoc §5.3, Table 5):
# mmpretrain's resnet50_8xb32_in1k (76.55 top-1); the backbone only (the head is new).
_base_ = './drloc_resnet50.py'

model = dict(
    backbone=dict(
        init_cfg=dict(
            _delete_=True,
            type='Pretrained',
            prefix='backbone',
            checkpoint='https://download.openmmlab.com/mmclassification/v0/resnet/resnet50_8xb32_in1k_20210831-ea4938fc.pth',
        )
    )
)
