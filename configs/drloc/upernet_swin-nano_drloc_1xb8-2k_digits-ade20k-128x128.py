# The digits UperNet Swin-nano (configs/swin/upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py: mmseg's Swin-T
# UperNet recipe, shrunk) as an mmvitreg.TokenSegmentor with DRLoc in the form of the dense configs of this folder
# (upernet_swin-t_drloc_8xb2-160k_ade20k-512x512.py): the last stage's tokens before its norm (4x4 at 128x128,
# 256 channels), the official loss (l1 on raw |Δ|, mean over B·m·2, endpoints with replacement, m = 64), λ = 0.5
# (Swin, paper and official), the MLP initialised as the official Swin does. Baseline: --cfg-options
# model.aux_losses=[]. The study of docs/claims.md ("Beyond the papers") trains it on 50 of the 200 canvases.
_base_ = '../swin/upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py'

model = dict(
    type='mmvitreg.TokenSegmentor',
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=256,
            layers=(-1,),
            num_pairs=64,
            loss_weight=0.5,
            target='abs',
            reduction='mean',
            replacement=True,
            init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
        )
    ],
)
