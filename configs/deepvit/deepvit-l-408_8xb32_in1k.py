# DeepViT-L at the paper's width (Table 6 / §5.4: 408-dim, 55M parameters); otherwise as
# deepvit-l_8xb32_in1k.py (32 blocks, CNN stem, re-attention in the last 12 blocks). No official
# checkpoint exists for this width.
_base_ = './deepvit_8xb32_in1k_recipe.py'

model = dict(backbone=dict(arch='l-408'), head=dict(in_channels=408))
