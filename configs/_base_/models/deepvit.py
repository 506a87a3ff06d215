# DeepViT (https://arxiv.org/abs/2103.11886) as an mmpretrain image classifier: the mmvitreg
# ViT-family backbone with the DeepViT presets, mmpretrain's ViT cls-token head.
# Arch (change `backbone.arch` and `head.in_channels` together):
#   '16b' / '24b' / '32b'        384-dim, re-attention in every block (Table 4), head in_channels 384
#   'vit-16b' / 'vit-24b' / 'vit-32b'   the plain ViT baselines of Table 2/4, head in_channels 384
#   's'  396-dim, 16 blocks, CNN stem (Table 6),                 head in_channels 396
#   'l'  420-dim, 32 blocks, CNN stem (official code; paper 408), head in_channels 420
model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmvitreg.DeepViT', arch='s', img_size=224),
    neck=None,
    head=dict(
        type='VisionTransformerClsHead',
        num_classes=1000,
        in_channels=396,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        # official code: the classifier is trunc_normal(std=.02) like every Linear (the model
        # init_cfg below); None keeps mmpretrain's head default (zeros) from overriding it
        init_cfg=None,
    ),
    # official `_init_weights`: Linear trunc_normal(std=.02) with zero bias, LayerNorm 1 / 0;
    # convolutions and BatchNorms keep the PyTorch defaults
    init_cfg=[
        dict(type='TruncNormal', layer='Linear', std=0.02),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0),
    ],
)
