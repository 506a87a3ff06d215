"""Diagnostics and measurements behind the tools in ``tools/analysis_tools/``."""
from .attention_similarity import (AttentionSimilarity, SimilarityResult, adjacent_blocks,
                                   attention_similarity, normalized_columns)

__all__ = [
    'AttentionSimilarity', 'SimilarityResult', 'adjacent_blocks', 'attention_similarity',
    'normalized_columns'
]
