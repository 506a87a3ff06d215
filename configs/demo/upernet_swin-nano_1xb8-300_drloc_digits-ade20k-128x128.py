# 275 s on 2 cores (train + test, one intra-op thread, 2026-12-07); mIoU 10.61 (chance 8.40), aAcc 92.16, mAcc 13.26.
# The digits UperNet Swin-nano with DRLoc regularising the backbone (configs/drloc's digits UperNet,
# upernet_swin-nano_drloc_1xb8-2k_digits-ade20k-128x128.py: the model's type is mmvitreg.TokenSegmentor, mmseg's
# EncoderDecoder with trace users; DRLoc in the official form of the dense configs, the last block's tokens,
# 4x4 at 128x128 crops and 256 channels) on the CPU schedule of upernet_swin-nano_1xb8-300_digits-ade20k-128x128.py.
# Baseline: --cfg-options model.aux_losses=[]
# Data: python tools/dataset_converters/digits.py ade20k --out data
_base_ = '../drloc/upernet_swin-nano_drloc_1xb8-2k_digits-ade20k-128x128.py'

# the schedule of upernet_swin-nano_1xb8-300_digits-ade20k-128x128.py (a config has one chain of bases)
max_iters = 300
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=50),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=50, end=max_iters, by_epoch=False),
]
default_hooks = dict(checkpoint=dict(interval=max_iters), logger=dict(interval=10))
