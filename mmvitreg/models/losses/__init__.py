"""Auxiliary losses of :class:`~mmvitreg.models.classifiers.TokenClassifier` (trace users)."""
from .attention_cosine_loss import AttentionCosineLoss

__all__ = ['AttentionCosineLoss']
