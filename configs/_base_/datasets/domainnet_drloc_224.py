# DomainNet (Peng et al. 2019; 345 classes) at 224 with the DRLoc official pipeline, one domain per run,
# read from the official split files (data/domainnet/{domain}_train.txt / {domain}_test.txt, lines
# "clipart/aircraft_carrier/clipart_001_000018.jpg 0") under data/domainnet/{domain}/; the integer labels
# come from those files, splits/domainnet_classes.txt names them. The domain configs set the split files.
_base_ = './drloc_224.py'

data_root = 'data/domainnet'
classes = 'configs/_base_/datasets/splits/domainnet_classes.txt'
data_preprocessor = dict(num_classes=345)
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',
        data_root=data_root,
        data_prefix='',
        ann_file='clipart_train.txt',
        metainfo=dict(classes=classes),
        pipeline={{_base_.train_pipeline}},
    )
)
val_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',
        data_root=data_root,
        data_prefix='',
        ann_file='clipart_test.txt',
        metainfo=dict(classes=classes),
        pipeline={{_base_.test_pipeline}},
    )
)
test_dataloader = val_dataloader
