# LV-ViT-L at 448 (paper Table 10 "LV-ViT-L↑448": 86.2%; official README checkpoint 86.2 at 448):
# the 384 fine-tuning recipe at 448 px with token label size 28 (448 / 16), from the 224 L checkpoint.
# Also the eval config of the official lvvit_l 448 checkpoint (crop_pct 1.0).
_base_ = './lvvit-s_8xb64_tl_in1k-384px.py'

img_size = 448
token_label_size = 28
load_from = 'work_dirs/lvvit-l_8xb128_tl_in1k/epoch_300.pth'

model = dict(backbone=dict(arch='l', img_size=img_size, drop_path_rate=0.3), head=dict(in_channels=768))
# the inherited 384 pipelines at 448, with the L recipe's 3 RandAugment ops
_changes = {
    'mmvitreg.RandAugmentWithLabelMap': dict(num_policies=3),
    'mmvitreg.RandomResizedCropWithLabelMap': dict(scale=img_size),
    'mmvitreg.TokenLabelTarget': dict(token_label_size=token_label_size),
    'ResizeEdge': dict(scale=img_size),
    'CenterCrop': dict(crop_size=img_size),
}
train_pipeline = [dict(t, **_changes.get(t.type, {})) for t in _base_.train_dataloader.dataset.pipeline]
test_pipeline = [dict(t, **_changes.get(t.type, {})) for t in _base_.val_dataloader.dataset.pipeline]
del _changes
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
