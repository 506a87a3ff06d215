"""Convert an official DeepViT checkpoint (zhoudaquan/dvit_repo) to an mmvitreg classifier checkpoint.

Usage: python tools/model_converters/deepvit_to_mmvitreg.py SRC DST [--ema] [--unsafe-load]

The result loads into ``ImageClassifier(backbone=dict(type='mmvitreg.DeepViT', arch=...),
head=dict(type='VisionTransformerClsHead', ...))``; official DeepViT models expect inputs
normalised with mean = std = 0.5.
"""

from checkpoint_converter import converter_cli

from mmvitreg.models.backbones.deepvit import convert_deepvit

if __name__ == '__main__':
    converter_cli(convert_deepvit, __doc__)
