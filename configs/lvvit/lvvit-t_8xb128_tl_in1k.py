# LV-ViT-T (paper Table 8: 8.5M, 79.1%): 240-dim, 12 blocks (official lvvit_t; the paper's text says
# 16 blocks / 192-dim). Drop path 0.1 as the paper's Table 2 default (no official command for T).
# Crop_pct 0.9 as the official default_cfg.
_base_ = './lvvit_8xb128_tl_in1k_recipe.py'

model = dict(backbone=dict(arch='t', drop_path_rate=0.1), head=dict(in_channels=240))
