# The teacher of the digits chain: mmpretrain's ResNet-18 for 32x32 inputs (ResNet_CIFAR: 3x3 stem, no
# max-pool; widths / 4) with global average pooling and a linear head, trained with label-smoothed CE.
# tools/generate_label_maps.py applies the head as a 1x1 convolution to the final 4x4 feature map
# (ReLabel's dense map; by linearity its average is the teacher's prediction); the student's data
# preprocessor reads it under the student's 8x8 tokens. (A cls-token ViT teacher annotates its patch
# tokens at chance level: its head is never trained on them.)
_base_ = './lvvit-tiny_1xb64_digits.py'

model = dict(
    _delete_=True,
    type='ImageClassifier',
    backbone=dict(type='ResNet_CIFAR', depth=18, stem_channels=16, base_channels=16),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=128,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
    ),
    data_preprocessor={{_base_.data_preprocessor}},
)
