from .token_classifier import TokenClassifier

__all__ = ['TokenClassifier']
