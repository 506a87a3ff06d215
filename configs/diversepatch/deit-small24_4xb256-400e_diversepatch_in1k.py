# DeiT-Small24 + DiversePatch, 400 epochs (paper Table 1: 82.2 top-1; baseline 80.3): DeiT-Small with 24 blocks
# (official deit_deepsmall_patch16_224: 384 channels, 6 heads), stochastic depth 0.5 (paper).
_base_ = './deit_4xb256_diversepatch_in1k_recipe.py'

model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=384, num_layers=24, num_heads=6, feedforward_channels=1536))
)
