# Swin-B (224) fine-tuned 30 epochs with DiversePatch's cosine and mixing losses (paper Table 1: 83.4 -> 83.7;
# Table 5). Paper §5.1: "we download the official SWIN-Base models ... further finetune them for another 30
# epochs ... batch size of 1024 (128 X 8 GPUS), a constant learning rate of 1e-5 and a weight decay of 1e-8".
# The official Swin fine-tuning code with the losses was never released (official issue #4); the rest is the
# official Swin recipe (mmpretrain's swin-base config). No contrastive loss on Swin (Table 5: N/A).
_base_ = 'mmpretrain::swin_transformer/swin-base_16xb64_in1k.py'

embed_dims = 1024  # Swin-B's last stage
model = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='mmvitreg.SwinTransformer'),
    aux_losses=[
        dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0),  # alpha_1 = 1 (paper)
        dict(type='mmvitreg.PatchMixingLoss', num_classes=1000, in_channels=embed_dims, loss_weight=1.0),  # alpha_3
    ],
    # MixUp removed as for DeiT (paper §5.1: not compatible with the mixing loss); CutMix boxes of whole
    # 32-px cells, so every token of the last stage (7x7) comes from one image
    train_cfg=dict(_delete_=True, mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=32)),
)
# the official Swin-B ImageNet-1k weights (224, window 7), converted by mmpretrain
load_from = 'https://download.openmmlab.com/mmclassification/v0/swin-transformer/convert/swin_base_patch4_window7_224-4670dd19.pth'  # noqa

train_dataloader = dict(batch_size=128)  # 128 x 8 GPUs = 1024 (paper)
max_epochs = 30
train_cfg = dict(max_epochs=max_epochs)
optim_wrapper = dict(optimizer=dict(lr=1e-5, weight_decay=1e-8))  # paper: constant 1e-5, wd 1e-8
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=max_epochs)]
auto_scale_lr = dict(base_batch_size=1024)
# a long run: the last 3 checkpoints (to resume) and the best top-1, not one per epoch
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=3, save_best='auto'))
