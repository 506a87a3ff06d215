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
    of a config. A training step is :meth:`~mmvitreg.models.trace_users.TraceUsers.loss`: one backbone pass with
    the trace, mmdet's own ``loss`` (RPN, RoI heads), then the users' terms (named apart from mmdet's).
    Prediction is mmdet's, without a trace. Users that need an image-level target are refused
    (:class:`~mmvitreg.models.trace_users.DenseTraceUsers`).
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
