"""Convert an official Swin Transformer checkpoint (microsoft/Swin-Transformer) to an mmvitreg classifier checkpoint.

Usage: python tools/model_converters/swin_to_mmvitreg.py SRC DST [--ema] [--unsafe-load]

Keys: ``backbone.*`` for ``mmvitreg.SwinTransformer`` (mmpretrain's Swin layout, patch-merging channels
reordered for mmcv's ``PatchMerging``) and ``head.fc.*`` for mmpretrain's ``LinearClsHead``. mmpretrain,
mmseg and mmdet Swin checkpoints need no conversion: they load as they are.
"""

from checkpoint_converter import converter_cli

from mmvitreg.models.backbones.swin_transformer import convert_swin

if __name__ == '__main__':
    converter_cli(convert_swin, __doc__)
