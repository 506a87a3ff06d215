# A teacher for tools/generate_label_maps.py that can be downloaded today: mmpretrain's
# EfficientNetV2-L (ImageNet-21k pre-trained, fine-tuned on ImageNet-1k, 86.31% top-1; the official
# maps come from NFNet-F6, 86.5%, whose weights mmpretrain does not ship). Stride 32: at 576 px it
# gives 18 x 18 maps like the official ones. The model (backbone, GlobalAveragePooling neck, linear
# head) and its normalisation are mmpretrain's; the tool applies the head at every cell of the final
# feature map. Checkpoint (mmpretrain metafile efficientnetv2-l_in21k-pre_3rdparty_in1k):
# https://download.openmmlab.com/mmclassification/v0/efficientnetv2/efficientnetv2-l_in21k-pre-3rdparty_in1k_20221220-63df0efd.pth
# Official-equivalent call (576 px, short side resized and centre-cropped, top-5; configs/lvvit/README.md):
#   python tools/generate_label_maps.py configs/lvvit/efficientnetv2-l_label-maps_in1k-576px.py \
#       efficientnetv2-l_in21k-pre-3rdparty_in1k_20221220-63df0efd.pth data/imagenet/label_maps_effv2l \
#       --img-size 576 --region center_square --topk 5
_base_ = 'mmpretrain::efficientnet_v2/efficientnetv2-l_8xb32_in1k-480px.py'

# the ImageNet training set to annotate (mmpretrain layout under data/imagenet); the tool replaces
# the pipeline by its own resize
train_dataloader = dict(dataset=dict(type='ImageNet', data_root='data/imagenet', split='train'))
# mmpretrain's 100-epoch schedule, if it is trained: the last 3 checkpoints and the best top-1
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=3, save_best='auto'))
