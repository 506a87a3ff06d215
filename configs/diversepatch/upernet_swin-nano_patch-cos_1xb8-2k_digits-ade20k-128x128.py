# The digits UperNet Swin-nano (configs/swin/upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py: mmseg's Swin-T
# UperNet recipe, shrunk) as an mmvitreg.TokenSegmentor with DiversePatch's patch-wise cosine loss on the last
# stage's tokens (4x4 at 128x128), alpha_1 = 1 (paper), as upernet_swin-t_patch-cos_8xb2-160k_ade20k-512x512.py.
# Baseline: --cfg-options model.aux_losses=[]. The study of docs/claims.md ("Beyond the papers") trains it on 50
# of the 200 canvases.
_base_ = '../swin/upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py'

model = dict(type='mmvitreg.TokenSegmentor', aux_losses=[dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0)])
