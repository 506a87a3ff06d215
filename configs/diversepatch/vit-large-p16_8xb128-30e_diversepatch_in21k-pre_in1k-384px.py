# ViT-L/16 (384) pre-trained on ImageNet-22k, fine-tuned 30 epochs on ImageNet-1k with the three losses (paper
# Table 2: 85.1 -> 85.3). Paper §5.1: batch 1024, constant lr 1e-5, wd 1e-8, 30 epochs, from the ViT release;
# mmpretrain's ViT-L 384 recipe otherwise. No talking heads (official ViT-L command: --no-use-talk).
_base_ = 'mmpretrain::vision_transformer/vit-large-p16_64xb64_in1k-384px.py'

embed_dims = 1024
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.VisionTransformer', drop_path_rate=0.0),  # official --drop-path 0.
    aux_losses=[
        dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0),
        dict(type='mmvitreg.PatchContrastiveLoss', loss_weight=1.0),
        dict(type='mmvitreg.PatchMixingLoss', num_classes=1000, in_channels=embed_dims, loss_weight=1.0),
    ],
    train_cfg=dict(mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=16)),  # base: no batch augments
)
# Google's ViT-L/16 22k -> 1k 384 weights (augreg), converted by mmpretrain
load_from = 'https://download.openmmlab.com/mmclassification/v0/vit/finetune/vit-large-p16_in21k-pre-3rdparty_ft-64xb64_in1k-384_20210928-b20ba619.pth'  # noqa

train_dataloader = dict(batch_size=128)  # x 8 GPUs = 1024 (paper)
max_epochs = 30
train_cfg = dict(max_epochs=max_epochs)
optim_wrapper = dict(optimizer=dict(lr=1e-5, weight_decay=1e-8))  # paper: constant 1e-5, wd 1e-8
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=max_epochs)]
auto_scale_lr = dict(base_batch_size=1024)
# a long run: the last 3 checkpoints (to resume) and the best top-1, not one per epoch
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=3, save_best='auto'))
