"""Diagnostics and measurements behind the tools in ``tools/analysis_tools/``."""
from .attention_similarity import (AttentionSimilarity, SimilarityResult, adjacent_blocks,
                                   attention_similarity, normalized_columns)
from .patch_similarity import patch_cosine_per_layer, patch_taps

__all__ = [
    'AttentionSimilarity', 'SimilarityResult', 'adjacent_blocks', 'attention_similarity',
    'normalized_columns', 'patch_cosine_per_layer', 'patch_taps'
]
