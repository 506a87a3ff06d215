from .token_label_head import TokenLabelHead

__all__ = ['TokenLabelHead']
