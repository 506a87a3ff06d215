# mmpretrain's CIFAR100 at 224 with the DRLoc official pipeline (50,000 train / 10,000 test, DRLoc Table 1);
# the images come decoded from the data set, so the pipelines skip loading.
_base_ = './drloc_224.py'

data_preprocessor = dict(num_classes=100)
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CIFAR100',
        data_root='data/cifar100',
        split='train',
        pipeline={{_base_.array_train_pipeline}},
    )
)
val_dataloader = dict(
    dataset=dict(
        _delete_=True, type='CIFAR100', data_root='data/cifar100', split='test', pipeline={{_base_.array_test_pipeline}}
    )
)
test_dataloader = val_dataloader
