# The digits UperNet Swin-nano (upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py) with DRLoc regularising
# the backbone: the model's type is mmvitreg.TokenSegmentor (mmseg's EncoderDecoder with trace users),
# nothing else of the model changes. One config with configs/drloc's digits UperNet, which it is: DRLoc in the
# official form of the dense configs (configs/drloc/upernet_swin-t_drloc_*: the last block's tokens, 4x4 at
# 128x128 crops and 256 channels, raw |offset| targets, 64 pairs drawn with replacement, lambda 0.5 for Swin,
# the official mean reduction, the MLP initialised as the official Swin does).
_base_ = '../drloc/upernet_swin-nano_drloc_1xb8-2k_digits-ade20k-128x128.py'
