# LV-ViT-S (paper Table 3/8: 26M, 83.3% at 224): 384-dim, 16 blocks, drop path 0.1 (paper Table 2,
# official --drop-path 0.1). Also the eval config of the official lvvit_s checkpoint (crop_pct 0.9).
_base_ = './lvvit_8xb128_tl_in1k_recipe.py'

model = dict(backbone=dict(arch='s', drop_path_rate=0.1), head=dict(in_channels=384))
