# The same tiny LV-ViT on the digits WITHOUT token labeling (the baseline of the chain): plain label-
# smoothed CE on the class token, no label maps, no MixToken (beta=0: the head trains the class token
# only and predicts from it alone).
_base_ = './lvvit-tiny_1xb64_tl_digits.py'

model = dict(head=dict(beta=0.0, aux_pred_weight=0.0), train_cfg=dict(_delete_=True))
img_size = 32
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='RandomResizedCrop', scale=img_size, crop_ratio_range=(0.6, 1.0), backend='pillow', interpolation='bicubic'
    ),
    dict(type='PackInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
