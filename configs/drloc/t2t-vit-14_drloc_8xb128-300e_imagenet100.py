# t2t-vit-14 + DRLoc from scratch on ImageNet-100, 300 epochs (DRLoc Table 3, right column): the 100-epoch
# config run to the end of its 300-epoch LR and λ schedules.
_base_ = './t2t-vit-14_drloc_8xb128-100e_imagenet100.py'

train_cfg = dict(max_epochs=300)
