# DeepViT-S (paper Table 6): 396-dim, 16 blocks, CNN stem; re-attention in the last 5 blocks
# (official deepvit_S; the paper says it replaces self-attention, without saying where).
_base_ = './deepvit_8xb32_in1k_recipe.py'

model = dict(backbone=dict(arch='s'), head=dict(in_channels=396))
