# DRLoc on the bundled digits with the quick-start DeiT-tiny (4 blocks of 96 channels, 8-pixel patches: a
# 4x4 token grid at 32x32; mmpretrain's DeiT recipe: Mixup/CutMix, label smoothing, AdamW, cosine).
# DRLoc reads the last block's patch tokens through the token trace (before the final norm, as the
# official ViT path) with the loss form of the official runs (l1 on raw |Δ|, mean reduction, endpoints
# with replacement: yhlleo/VTs-Drloc train.sh --use_abs) and a fixed λ = 0.1 (the paper's T2T / CvT value;
# the paper's main text gives none for ViT). The baseline of the same run: --cfg-options model.aux_losses=[]
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = '../demo/deit-tiny_1xb64_digits.py'

model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.VisionTransformer'),
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=96,
            layers=(-1,),
            loss_weight=0.1,
            target='abs',
            reduction='mean',
            replacement=True,
        )
    ],
)
