# ImageNet-100 at 224 with the DRLoc official pipeline: the 100 ImageNet-1k classes of the official
# scripts/imagenet-100.lst (splits/imagenet100_wnids.txt), read as folders like the official ImageFolder:
# data/imagenet100/{train,val}/<wnid>/*.JPEG (126,689 / 5,000 images, DRLoc Table 1); classes in sorted
# wnid order. Build it from ImageNet-1k with links, e.g. (val/ sorted into wnid folders):
#   for w in $(cat configs/_base_/datasets/splits/imagenet100_wnids.txt); do for s in train val; do
#     mkdir -p data/imagenet100/$s && ln -s $PWD/data/imagenet/$s/$w data/imagenet100/$s/$w; done; done
_base_ = './drloc_224.py'

data_preprocessor = dict(num_classes=100)
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',
        data_root='data/imagenet100',
        data_prefix='train',
        pipeline={{_base_.train_pipeline}},
    )
)
val_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',
        data_root='data/imagenet100',
        data_prefix='val',
        pipeline={{_base_.test_pipeline}},
    )
)
test_dataloader = val_dataloader
