DETECTORS = ['TokenTwoStageDetector', 'TokenFasterRCNN', 'TokenMaskRCNN', 'TokenCascadeRCNN']
try:
    from .token_detectors import TokenCascadeRCNN, TokenDetector, TokenFasterRCNN, TokenMaskRCNN, TokenTwoStageDetector
except ImportError as error:  # mmdet's models import mmcv's compiled ops, which mmcv-lite lacks
    from ..unavailable import register_unavailable

    register_unavailable(DETECTORS, 'mmdet', error)
else:
    __all__ = ['TokenDetector'] + DETECTORS
