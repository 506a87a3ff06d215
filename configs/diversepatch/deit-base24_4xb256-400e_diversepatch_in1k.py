# DeiT-Base24 + DiversePatch, 400 epochs (paper Tables 1 and 5: 83.3 top-1; baseline 82.1): DeiT-Base with 24
# blocks (official deit_deepbase_patch16_224), stochastic depth 0.5 (paper). Table 5's ablations switch losses
# off with --cfg-options, e.g. model.aux_losses.1.loss_weight=0 (cosine + mixing: 83.1).
_base_ = './deit-base12_4xb256-400e_diversepatch_in1k.py'

model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=768, num_layers=24, num_heads=12, feedforward_channels=3072))
)
