# ViT-L/16 (224) fine-tuned 30 epochs with the three losses (paper Table 2: 83.6 -> 83.9; official README
# VIT-L24 83.9), the 384 recipe at 224 (mmpretrain's ViT-L 224 pipelines; position embeddings resized on load).
_base_ = './vit-large-p16_8xb128-30e_diversepatch_in21k-pre_in1k-384px.py'

model = dict(backbone=dict(img_size=224))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=224, backend='pillow'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=256, edge='short', backend='pillow'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
