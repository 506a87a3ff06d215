# DeepViT-L (paper Table 6): 32 blocks, CNN stem, re-attention in the last 12 blocks. 420-dim as
# the official deepvit_L (58.9M parameters), so its checkpoints load; the paper states 408-dim / 55M
# (deepvit-l-408_8xb32_in1k.py).
_base_ = './deepvit_8xb32_in1k_recipe.py'

model = dict(backbone=dict(arch='l'), head=dict(in_channels=420))
