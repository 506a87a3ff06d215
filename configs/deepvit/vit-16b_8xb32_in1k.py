# ViT-16B, the plain baseline of DeepViT-16B (paper Tables 2 and 4): self-attention everywhere.
_base_ = './deepvit_8xb32_in1k_recipe.py'

model = dict(backbone=dict(arch='vit-16b'), head=dict(in_channels=384))
