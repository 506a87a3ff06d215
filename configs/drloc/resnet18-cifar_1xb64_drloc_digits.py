# DRLoc on the bundled digits with mmpretrain's ResNet-18 for 32x32 inputs (ResNet_CIFAR, widths / 4; the
# digits teacher of configs/lvvit) on the shared digits schedule with Mixup/CutMix (the paper's "standard
# ResNet protocol" for Table 4). No trace: DRLoc reads the layer4 map (4x4 at 32x32; ResNet-50: 7x7 at 224);
# official loss form, λ = 0.1 (the paper gives none for ResNet). Baseline: --cfg-options model.aux_losses=[]
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = '../lvvit/resnet18-cifar-w16_1xb64_digits-teacher.py'

model = dict(
    type='mmvitreg.TokenClassifier',
    aux_losses=[
        dict(type='mmvitreg.DRLoc', in_channels=128, loss_weight=0.1, target='abs', reduction='mean', replacement=True)
    ],
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
)
