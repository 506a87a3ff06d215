try:
    from .token_segmentor import TokenSegmentor
except ImportError as error:  # mmseg's models import mmcv's compiled ops, which mmcv-lite lacks
    from ..unavailable import register_unavailable

    register_unavailable(['TokenSegmentor'], 'mmseg', error)
else:
    __all__ = ['TokenSegmentor']
