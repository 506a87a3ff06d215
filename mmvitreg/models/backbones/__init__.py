"""Backbones of mmvitreg, all carrying the token trace (registered in ``mmvitreg.registry.MODELS``)."""

from .cvt import CvT
from .deepvit import DeepViT, convert_deepvit
from .lvvit import LVViT, convert_lvvit
from .swin_transformer import SwinTransformer, convert_swin
from .vision_transformer import VisionTransformer

__all__ = [
    'CvT',
    'VisionTransformer',
    'DeepViT',
    'LVViT',
    'SwinTransformer',
    'convert_deepvit',
    'convert_lvvit',
    'convert_swin',
]
