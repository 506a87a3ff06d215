# ./drloc_t2t-vit-14.py starting from ImageNet-1k weights trained without DRLoc (DRLoc §5.3, Table 5):
# mmpretrain's t2t-vit-t-14_8xb64_in1k (81.83 top-1); the backbone only (the head is new).
_base_ = './drloc_t2t-vit-14.py'

model = dict(
    backbone=dict(
        init_cfg=dict(
            _delete_=True,
            type='Pretrained',
            prefix='backbone',
            checkpoint='https://download.openmmlab.com/mmclassification/v0/t2t-vit/t2t-vit-t-14_8xb64_in1k_20211220-f7378dd5.pth',
        )
    )
)
