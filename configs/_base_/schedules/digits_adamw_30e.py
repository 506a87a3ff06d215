# The ImageNet recipes' optimiser (AdamW, wd 0.05, no decay on norms / biases / cls_token / pos_embed,
# warm-up + cosine) on the short schedule of the bundled digits sets: 30 epochs of ~1500 images,
# 2 warm-up epochs, validation every 10 (children set the checkpoint interval in default_hooks, which
# the runtime base owns).
max_epochs = 30
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        flat_decay_mult=0.0,
        custom_keys={'.cls_token': dict(decay_mult=0.0), '.pos_embed': dict(decay_mult=0.0)},
    ),
)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=2, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=2, end=max_epochs),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=10)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=64)
