# TL-Align Swin-S on ImageNet-1k from scratch (paper Table 1: 83.0 -> 83.4 top-1): the Swin-T config of this
# folder with mmpretrain's Swin-S model numbers (swin_transformer/small_224.py: arch 'small', drop path 0.3).
_base_ = './swin-tiny_16xb64_cutmix-tlalign_in1k.py'

model = dict(backbone=dict(arch='small', drop_path_rate=0.3))
