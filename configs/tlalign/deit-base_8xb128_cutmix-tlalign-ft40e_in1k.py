# TL-Align DeiT-B on ImageNet-1k (paper Table 1: 81.8 -> 82.3 top-1): "we finetune the official pre-trained
# models for 40 epochs with a constant learning rate of 1e-5 and a weight decay of 1e-8" (paper Sec. 4.1),
# from the official DeiT-B weights (converted by mmpretrain), with the DeiT recipe of this folder otherwise
# (TL-Align's CutMix, label smoothing, RandAugment, repeated augmentation, drop path 0.1, batch 8 x 128).
_base_ = './deit_8xb128_cutmix-tlalign_in1k_recipe.py'

# the whole classifier (backbone and head) starts from it, as mmengine's `load_from` loads before training
load_from = (
    'https://download.openmmlab.com/mmclassification/v0/deit/deit-base_3rdparty_pt-16xb64_in1k_20211124-6f40c188.pth'  # noqa
)
model = dict(backbone=dict(arch='deit-base'), head=dict(in_channels=768))

# paper: constant lr 1e-5 and wd 1e-8 for 40 epochs (at the batch of the from-scratch runs, 1024)
optim_wrapper = dict(optimizer=dict(lr=1e-5, weight_decay=1e-8))
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0)]
train_cfg = dict(max_epochs=40)
