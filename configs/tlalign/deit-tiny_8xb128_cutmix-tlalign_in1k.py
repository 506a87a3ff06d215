# TL-Align DeiT-T on ImageNet-1k (paper Table 1: 72.2 -> 73.2 top-1): the DeiT-S recipe of the official script
# with the DeiT-T arch (the paper trains tiny and small alike; only DeiT-S has an official script).
_base_ = './deit_8xb128_cutmix-tlalign_in1k_recipe.py'

model = dict(backbone=dict(arch='deit-tiny'), head=dict(in_channels=192))
