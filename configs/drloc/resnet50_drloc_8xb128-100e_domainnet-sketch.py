# resnet50 + DRLoc from scratch on domainnet-sketch, 100 epochs at 224 (DRLoc Table 4); the baseline of that row:
# --cfg-options model.aux_losses=[]. Deviations: configs/drloc/README.md
_base_ = [
    '../_base_/models/drloc_resnet50.py',
    '../_base_/datasets/domainnet-sketch_drloc_224.py',
    '../_base_/schedules/drloc_adamw_100e.py',
]

model = dict(head=dict(num_classes=345))
