# 159 s on 2 cores (data, train + test: the quick start from a fresh clone, 2026-12-07); top-1 61.62 (chance 10).
# The quick start (bash tools/quickstart.sh): DRLoc on the quick-start DeiT-tiny
# (configs/drloc/deit-tiny_1xb64_drloc_digits.py: mmpretrain's DeiT recipe shrunk to a 4x4 token grid at 32x32,
# with DRLoc's dense relative localization loss on the last block's patch tokens, lambda 0.1) on 13 of its
# 30 epochs, so that the quick start stays within 3 minutes on 2 cores (15 epochs took 182 s). Every training log
# line shows the term DRLoc adds (`loss_drloc`, already weighted) beside `loss_cls`.
# The baseline of the same run: --cfg-options model.aux_losses=[]
# Data: python tools/dataset_converters/digits.py imagenet --out data
_base_ = '../drloc/deit-tiny_1xb64_drloc_digits.py'

max_epochs = 13
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=2, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=2, end=max_epochs),
]
default_hooks = dict(checkpoint=dict(interval=max_epochs))
