# The data pipeline of the DRLoc official code (yhlleo/VTs-Drloc data/build.py: timm create_transform(224)
# for every dataset, CIFAR / SVHN upsampled): RandomResizedCrop 224 (bicubic), flip, RandAugment
# rand-m9-mstd0.5-inc1, random erasing 0.25 (colour jitter 0.4 is set but timm skips it under RandAugment);
# evaluation Resize 256 + CenterCrop 224; ImageNet mean / std. That is mmpretrain's Swin ImageNet pipeline.
# 8 GPUs x 128 images, drop_last (official DistributedSampler loader).
_base_ = 'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py'

train_dataloader = dict(batch_size=128, drop_last=True)
val_dataloader = dict(batch_size=128)
test_dataloader = val_dataloader

# data sets held in memory (mmpretrain's CIFAR, mmvitreg.SVHN) hand over decoded images: the same
# transforms without the loading step
bgr_mean = [103.53, 116.28, 123.675]
bgr_std = [57.375, 57.12, 58.395]
array_train_pipeline = [
    dict(type='RandomResizedCrop', scale=224, backend='pillow', interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(
        type='RandAugment',
        policies='timm_increasing',
        num_policies=2,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(pad_val=[round(x) for x in bgr_mean], interpolation='bicubic'),
    ),
    dict(
        type='RandomErasing',
        erase_prob=0.25,
        mode='rand',
        min_area_ratio=0.02,
        max_area_ratio=1 / 3,
        fill_color=bgr_mean,
        fill_std=bgr_std,
    ),
    dict(type='PackInputs'),
]
array_test_pipeline = [
    dict(type='ResizeEdge', scale=256, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
