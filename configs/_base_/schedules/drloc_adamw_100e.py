# The DRLoc official schedule (yhlleo/VTs-Drloc config.py, main.py, lr_scheduler.py): mmpretrain's Swin
# AdamW schedule (lr 5e-4 x 1024 / 512 = 1e-3, wd 0.05, no decay on norms / biases / position tables)
# plus grad clipping 5, and the official LR curve per iteration, timm's CosineLRScheduler
# (mmvitreg.TimmCosineLR): the cosine to 1e-5 laid over --total_epochs 300 from epoch 0, its first 20
# epochs taken by the warm-up from 1e-6 (so the LR is 0.989x the peak at epoch 20), while the official
# loop runs epochs 0..100 (101 epochs: the LR ends at 0.753x its peak); and the
# official λ warm-up (20 epochs) / linear decay (to epoch 300) of the DRLoc weight (a model without DRLoc,
# the baseline --cfg-options model.aux_losses=[], trains with the hook idle).
# The official numbers are the best validation top-1 over the epochs (checked every epoch). With the runtime.
_base_ = ['mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py', 'mmpretrain::_base_/default_runtime.py']

total_epochs = 300  # official --total_epochs: the LR and λ schedules' length
warmup_epochs = 20  # official TRAIN.WARMUP_EPOCHS and the λ warm-up
max_epochs = 101  # official main.py: for epoch in range(START_EPOCH, 101)
optim_wrapper = dict(clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(
        type='mmvitreg.TimmCosineLR',
        T_max=total_epochs,
        warmup=warmup_epochs,
        warmup_lr_init=1e-6,
        eta_min=1e-5,
        by_epoch=True,
        convert_to_iter_based=True,
    )
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
custom_hooks = [dict(type='mmvitreg.DRLocWeightScheduleHook', warmup_epochs=warmup_epochs, total_epochs=total_epochs)]
default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=5, max_keep_ckpts=2, save_best='auto'))
