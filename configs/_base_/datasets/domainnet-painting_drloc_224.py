# DomainNet painting (DRLoc Table 1); see ./domainnet_drloc_224.py
_base_ = './domainnet_drloc_224.py'

train_dataloader = dict(dataset=dict(ann_file='painting_train.txt'))
val_dataloader = dict(dataset=dict(ann_file='painting_test.txt'))
test_dataloader = val_dataloader
