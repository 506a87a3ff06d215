# mmpretrain's Flowers102 at 224 with the DRLoc official pipeline: train = trnid + valid (2,040 images,
# split 'trainval'), test = tstid (6,149) as the official prepare_flowers102.py and DRLoc Table 1.
# Files: data/flowers102/{jpg/, imagelabels.mat, setid.mat}
_base_ = './drloc_224.py'

data_preprocessor = dict(num_classes=102)
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='Flowers102',
        data_root='data/flowers102',
        split='trainval',
        pipeline={{_base_.train_pipeline}},
    )
)
val_dataloader = dict(
    dataset=dict(
        _delete_=True, type='Flowers102', data_root='data/flowers102', split='test', pipeline={{_base_.test_pipeline}}
    )
)
test_dataloader = val_dataloader
