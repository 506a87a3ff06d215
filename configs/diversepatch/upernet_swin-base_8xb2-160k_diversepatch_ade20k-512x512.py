# UperNet Swin-B on ADE20K with the DiversePatch Swin-B backbone (paper Table 3: 48.4 / 50.1 ms+flip; Swin-B
# baseline 48.1 / 49.7). Paper §5.2: mmseg's UperNet Swin recipe (this base: 512x512 crops, 160k iterations,
# 8 GPUs x 2 images, UPerHead + FCN auxiliary head) with AdamW 6e-5, wd 0.01, a cosine decay after 1,500
# linear warm-up iterations, stochastic depth 0.3 for the first 80 % of the iterations and 0.5 for the last
# 20 %, single-scale and multi-scale + flip evaluation at {0.5, ..., 1.75} (`tools/test.py --tta`).
# No diversity loss during segmentation (official issue #4): only the backbone's weights differ.
_base_ = 'mmseg::swin/swin-base-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'

# the backbone of configs/diversepatch/swin-base_8xb128-30e_diversepatch_in1k.py (train it first)
checkpoint_file = 'work_dirs/swin-base_8xb128-30e_diversepatch_in1k/epoch_30.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitreg.SwinTransformer',
        arch='base',
        img_size=224,
        window_size=7,
        drop_path_rate=0.3,  # paper: 0.3 first (the hook below scales it)
        out_indices=(0, 1, 2, 3),
        pad_small_map=True,  # mmseg's Swin pads every map to whole windows and always shifts
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint_file, prefix='backbone.'),
    )
)

max_iters = 160000  # paper: 160K iterations on ADE20K
warmup_iters = 1500  # paper: "a linear learning rate warmup of 1,500 iterations"
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=warmup_iters),
    dict(type='CosineAnnealingLR', eta_min=0.0, by_epoch=False, begin=warmup_iters, end=max_iters),  # paper: cosine
]
train_cfg = dict(max_iters=max_iters)
# paper: "stochastic depth dropout of 0.3 for the first 80% of training iterations ... 0.5 for the last 20%"
custom_hooks = [dict(type='mmvitreg.DropPathScheduleHook', schedule=[(0.0, 0.3), (0.8, 0.5)])]

# paper: "The images are evaluated at 2048x1024" (mmseg: 2048x512)
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2048, 1024), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
# a long run: the last 3 checkpoints (to resume) and the best mIoU, not all ten the library keeps
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3, save_best='mIoU'))
