# Swin-T with DRLoc as in the official code (yhlleo/VTs-Drloc models/swin.py, train.sh): mmpretrain's Swin-T
# classifier (drop path 0.2, Mixup 0.8 / CutMix 1.0, label smoothing 0.1, trunc-normal init of every Linear,
# which also reaches the DRLoc MLP as the official apply(_init_weights) does) with mmvitreg's Swin, whose
# token trace hands DRLoc the last stage before its final norm (7x7 at 224). Official loss form: l1 on raw
# |Δ| (--use_abs), mean over B·m·2, endpoints drawn with replacement, m = 64, λ = 0.5 (paper and train.sh).
_base_ = 'mmpretrain::_base_/models/swin_transformer/tiny_224.py'

model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.SwinTransformer'),
    aux_losses=[
        dict(
            type='mmvitreg.DRLoc',
            in_channels=768,
            layers=(-1,),
            num_pairs=64,
            loss_weight=0.5,
            target='abs',
            reduction='mean',
            replacement=True,
        )
    ],
)
