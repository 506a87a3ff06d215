# UperNet Swin-T + DRLoc (upernet_swin-t_drloc_8xb2-160k_ade20k-512x512.py) trained on 1/8 of ADE20K's training
# images: the small-data setting DRLoc is about. The split is fixed and needs no file: every 8th of the 20,210
# training images in mmseg's order (sorted by file name), from the first (ADE_train_00000001, 00000009, ...):
# 2,527 images, spread evenly over the numbered files rather than a block of them. Everything else is the
# full-data config's (mmseg's recipe: 160k iterations, 8 GPUs x 2 images), so that the two differ only in the data;
# validation on the whole 2,000-image validation set. Baseline on the same split: --cfg-options model.aux_losses=[]
_base_ = './upernet_swin-t_drloc_8xb2-160k_ade20k-512x512.py'

num_train_images = 20210  # ADEChallengeData2016/images/training
train_dataloader = dict(dataset=dict(indices=list(range(0, num_train_images, 8))))
