"""Necks of mmvitreg (dense-prediction adapters of plain ViT backbones, the cls-token picker)."""

from .cls_token_neck import ClsTokenNeck
from .lvvit_side_neck import LVViTSideNeck

__all__ = ['ClsTokenNeck', 'LVViTSideNeck']
