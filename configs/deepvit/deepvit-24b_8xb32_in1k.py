# DeepViT-24B (paper Table 4): 384-dim, 24 blocks, re-attention in every block.
_base_ = './deepvit_8xb32_in1k_recipe.py'

model = dict(backbone=dict(arch='24b'), head=dict(in_channels=384))
