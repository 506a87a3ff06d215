"""Necks of mmvitreg (dense-prediction adapters of plain ViT backbones)."""
from .lvvit_side_neck import LVViTSideNeck

__all__ = ['LVViTSideNeck']
