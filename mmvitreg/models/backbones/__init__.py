"""ViT-family backbones of mmvitreg (registered in ``mmvitreg.registry.MODELS``)."""
from .deepvit import DeepViT, convert_deepvit
from .lvvit import LVViT, convert_lvvit
from .vision_transformer import VisionTransformer

__all__ = ['VisionTransformer', 'DeepViT', 'LVViT', 'convert_deepvit', 'convert_lvvit']
