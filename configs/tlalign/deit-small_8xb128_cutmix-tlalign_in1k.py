# TL-Align DeiT-S on ImageNet-1k (paper Table 1: 79.8 -> 80.6 top-1), the official script's run.
_base_ = './deit_8xb128_cutmix-tlalign_in1k_recipe.py'
