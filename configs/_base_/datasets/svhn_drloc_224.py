# mmvitreg.SVHN (official train_32x32.mat / test_32x32.mat: 73,257 / 26,032, no "extra", DRLoc Table 1) at 224
# with the DRLoc official pipeline; the images come decoded from the .mat files, so the pipelines skip loading.
_base_ = './drloc_224.py'

data_preprocessor = dict(num_classes=10)
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='mmvitreg.SVHN',
        data_root='data/svhn',
        split='train',
        pipeline={{_base_.array_train_pipeline}},
    )
)
val_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='mmvitreg.SVHN',
        data_root='data/svhn',
        split='test',
        pipeline={{_base_.array_test_pipeline}},
    )
)
test_dataloader = val_dataloader
