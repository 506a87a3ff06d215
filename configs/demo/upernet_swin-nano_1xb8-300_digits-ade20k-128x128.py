# 257 s on 2 cores (train + test, one intra-op thread, 2026-12-07); mIoU 10.70 (chance 8.40), aAcc 91.10, mAcc 16.52.
# The digits UperNet Swin-nano (configs/swin/upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py: mmseg's Swin-T
# UperNet ADE20K recipe with mmvitreg.SwinTransformer, shrunk) on a schedule sized for a CPU: 300 iterations
# (the 2,000 of the technique folders' digits UperNets take ~11 minutes on 2 cores), progress every 10.
# Data: python tools/dataset_converters/digits.py ade20k --out data
_base_ = '../swin/upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py'

max_iters = 300
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=50),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=50, end=max_iters, by_epoch=False),
]
default_hooks = dict(checkpoint=dict(interval=max_iters), logger=dict(interval=10))
