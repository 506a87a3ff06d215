"""Convert an official LV-ViT checkpoint (zihangJiang/TokenLabeling) to an mmvitreg classifier checkpoint.

Usage: python tools/model_converters/lvvit_to_mmvitreg.py SRC DST [--ema] [--unsafe-load]

Keys: ``backbone.*`` for ``mmvitreg.LVViT``, ``head.layers.head.*`` for the cls-token head and
``head.aux_head.*`` for the token-labeling aux head.
"""

from checkpoint_converter import converter_cli

from mmvitreg.models.backbones.lvvit import convert_lvvit

if __name__ == '__main__':
    converter_cli(convert_lvvit, __doc__)
