"""Auxiliary losses of :class:`~mmvitreg.models.classifiers.TokenClassifier` (trace users)."""
from .attention_cosine_loss import AttentionCosineLoss
from .drloc import DRLoc

__all__ = ['AttentionCosineLoss', 'DRLoc']
