# cvt-13 + DRLoc from scratch on cifar10, 100 epochs at 224 (DRLoc Table 4); the baseline of that row:
# --cfg-options model.aux_losses=[]. Deviations: configs/drloc/README.md
_base_ = [
    '../_base_/models/drloc_cvt-13.py',
    '../_base_/datasets/cifar10_drloc_224.py',
    '../_base_/schedules/drloc_adamw_100e.py',
]

model = dict(head=dict(num_classes=10))
