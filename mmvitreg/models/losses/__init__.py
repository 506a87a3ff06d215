"""Auxiliary losses of :class:`~mmvitreg.models.classifiers.TokenClassifier` (trace users)."""

from .attention_cosine_loss import AttentionCosineLoss
from .drloc import DRLoc
from .patch_contrastive_loss import PatchContrastiveLoss
from .patch_cosine_loss import PatchCosineLoss, patch_cosine_similarity
from .patch_mixing_loss import PatchMixingLoss

__all__ = [
    'AttentionCosineLoss',
    'DRLoc',
    'PatchContrastiveLoss',
    'PatchCosineLoss',
    'PatchMixingLoss',
    'patch_cosine_similarity',
]
