# The digits UperNet Swin-nano (upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py) with DRLoc regularising
# the backbone: the model's type is mmvitreg.TokenSegmentor (mmseg's EncoderDecoder with trace users),
# nothing else of the model changes. DRLoc reads the last block's token map (4x4 at 128x128 crops, 256
# channels) in the official form the dense configs use (configs/drloc/upernet_swin-t_drloc_*: raw |offset|
# targets, draws with replacement, lambda 0.5 for Swin, the official mean reduction: the paper's sum over the
# images would scale the loss with the per-GPU batch, and segmentation batches are small).
_base_ = './upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py'

model = dict(
    type='mmvitreg.TokenSegmentor',
    aux_losses=[dict(type='mmvitreg.DRLoc', in_channels=256, layers=(-1, ), loss_weight=0.5, target='abs',
                     reduction='mean', replacement=True)])
