from .token_cls_data_preprocessor import TokenClsDataPreprocessor

__all__ = ['TokenClsDataPreprocessor']
