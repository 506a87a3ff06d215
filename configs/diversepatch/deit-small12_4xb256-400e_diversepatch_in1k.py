# DeiT-Small12 + DiversePatch, 400 epochs (paper Table 1: 81.2 top-1; DeiT baseline 80.4).
_base_ = './deit_4xb256_diversepatch_in1k_recipe.py'
