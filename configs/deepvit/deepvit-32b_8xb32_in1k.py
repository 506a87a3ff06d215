# DeepViT-32B (paper Table 4): 384-dim, 32 blocks, re-attention in every block.
# The paper trains all Table 4 models with one recipe; the official 32B YAML differs (mixup 0.1,
# cutmix 0, AMP, cosine-similarity regulariser on 12 blocks), see README.md.
_base_ = './deepvit_8xb32_in1k_recipe.py'

model = dict(backbone=dict(arch='32b'), head=dict(in_channels=384))
