# Swin-L (384) pre-trained on ImageNet-22k, fine-tuned 30 epochs on ImageNet-1k with the cosine and mixing
# losses (paper Table 2: 87.3 -> 87.4; the backbone of the Table 3 / 4 segmentation runs). Paper §5.1: batch
# 1024, constant lr 1e-5, wd 1e-8, 30 epochs, from the official Swin 22k release.
_base_ = './swin-base_8xb128-30e_diversepatch_in1k-384px.py'

embed_dims = 1536  # Swin-L's last stage
model = dict(
    backbone=dict(arch='large'),
    head=dict(in_channels=embed_dims),
    aux_losses=[
        dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0),
        dict(type='mmvitreg.PatchMixingLoss', num_classes=1000, in_channels=embed_dims, loss_weight=1.0),
    ],
)
# the official 22k -> 1k Swin-L 384 release (87.3 %, the Table 2 baseline), converted by mmpretrain
load_from = 'https://download.openmmlab.com/mmclassification/v0/swin-transformer/convert/swin_large_patch4_window12_384_22kto1k-0a40944b.pth'  # noqa
