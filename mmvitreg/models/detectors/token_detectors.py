"""mmdet's two-stage and cascade detectors with trace users (the token losses in object detection)."""
from mmdet.models.detectors import CascadeRCNN, FasterRCNN, MaskRCNN, TwoStageDetector

from mmvitreg.registry import MODELS
from ..trace_users import DenseTraceUsers


class TokenDetector(DenseTraceUsers):
    """The trace users of an mmdet detector: mixed in before the detector class, e.g. ::

        @MODELS.register_module()
        class TokenCascadeRCNN(TokenDetector, CascadeRCNN):
            pass

    so that ``type='CascadeRCNN'`` -> ``type='mmvitreg.TokenCascadeRCNN'`` plus ``aux_losses`` is the only change
    of a config. A training step runs the backbone once with the trace the users ask for, then mmdet's
    own ``loss`` (for a two-stage detector the RPN's ``loss_rpn_cls`` / ``loss_rpn_bbox`` and the RoI head's
    terms, ``s0.loss_cls`` ... in a cascade) on its outputs through the neck, then the users' terms on the
    backbone's outputs before the neck; their names must differ from mmdet's (an error otherwise). Prediction is
    mmdet's, without a trace (the composition rule of every model kind:
    :meth:`~mmvitreg.models.trace_users.TraceUsers.loss`). Users that need an image-level target (TL-Align,
    MixToken, TokenLabelHead, PatchMixingLoss) are refused when the model is built.
    """


@MODELS.register_module()
class TokenTwoStageDetector(TokenDetector, TwoStageDetector):
    """mmdet's :class:`TwoStageDetector` with ``aux_losses`` (see :class:`TokenDetector`)."""


@MODELS.register_module()
class TokenFasterRCNN(TokenDetector, FasterRCNN):
    """mmdet's :class:`FasterRCNN` with ``aux_losses`` (see :class:`TokenDetector`)."""


@MODELS.register_module()
class TokenMaskRCNN(TokenDetector, MaskRCNN):
    """mmdet's :class:`MaskRCNN` with ``aux_losses`` (see :class:`TokenDetector`)."""


@MODELS.register_module()
class TokenCascadeRCNN(TokenDetector, CascadeRCNN):
    """mmdet's :class:`CascadeRCNN` (also Cascade Mask R-CNN) with ``aux_losses`` (see :class:`TokenDetector`)."""
