# LV-ViT with token labeling (https://arxiv.org/abs/2104.10858) as an mmpretrain classifier:
# mmvitreg.TokenClassifier runs the backbone with a token trace, so MixToken can mix the patch
# tokens before the position embedding and the token-labeling head can read every output token.
# Arch (change `backbone.arch` and `head.in_channels` together): 't' 240, 's' 384, 'm' 512, 'l' 768.
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.LVViT', arch='s', img_size=224, drop_path_rate=0.1, out_type='raw'),
    neck=None,
    head=dict(
        type='mmvitreg.TokenLabelHead',
        num_classes=1000,
        in_channels=384,
        beta=0.5,  # paper Eq. 7 ("we empirically set it to 0.5"); the official code weighs it 1.0
        cls_target='gt',  # paper: the image label; official: 'relabel' (the recipe's), 'relabel_gt' (--ground-truth)
        token_label_smooth_val=0.1,  # official --smoothing 0.1 on the token labels
        aux_pred_weight=0.5,  # official inference: cls logits + 0.5 * max over tokens of the aux logits
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
    ),
    # MixToken (Eq. 8-10): one Beta(1, 1) box on the 14x14 token grid per batch, flip partner
    # (official); the data preprocessor draws it, the backbone mixes the patch tokens
    train_cfg=dict(mix=dict(type='mmvitreg.MixToken', alpha=1.0, patch_size=16, partner='flip')),
)
