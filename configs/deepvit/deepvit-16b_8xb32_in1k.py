# DeepViT-16B (paper Table 4): 384-dim, 16 blocks, re-attention in every block.
_base_ = './deepvit_8xb32_in1k_recipe.py'

model = dict(backbone=dict(arch='16b'), head=dict(in_channels=384))
