# swin-t pre-trained on ImageNet-1k, fine-tuned with DRLoc on flowers102 for 100 epochs (DRLoc Table 5); the
# baseline of that row: --cfg-options model.aux_losses=[]. Deviations: configs/drloc/README.md
_base_ = [
    '../_base_/models/drloc_swin-t_in1k-pre.py',
    '../_base_/datasets/flowers102_drloc_224.py',
    '../_base_/schedules/drloc_adamw_100e.py',
]

model = dict(head=dict(num_classes=102))
