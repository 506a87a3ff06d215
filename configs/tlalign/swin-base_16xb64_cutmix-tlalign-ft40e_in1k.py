# TL-Align Swin-B on ImageNet-1k (paper Table 1: 83.5 -> 83.7 top-1): "we finetune the official pre-trained
# models for 40 epochs with a constant learning rate of 1e-5 and a weight decay of 1e-8" (paper Sec. 4.1),
# from the official Swin-B weights (converted by mmpretrain), with the Swin recipe of this folder otherwise.
_base_ = './swin-tiny_16xb64_cutmix-tlalign_in1k.py'

# the whole classifier (backbone and head) starts from it, as mmengine's `load_from` loads before training
load_from = 'https://download.openmmlab.com/mmclassification/v0/swin-transformer/convert/swin_base_patch4_window7_224-4670dd19.pth'  # noqa
model = dict(
    backbone=dict(arch='base', drop_path_rate=0.5),  # mmpretrain's swin_transformer/base_224.py (official)
    head=dict(in_channels=1024),
)

# paper: constant lr 1e-5 and wd 1e-8 for 40 epochs (at the recipe's batch, 1024)
optim_wrapper = dict(optimizer=dict(lr=1e-5, weight_decay=1e-8))
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0)]
train_cfg = dict(max_epochs=40)
