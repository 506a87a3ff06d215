"""mmseg's encoder-decoder segmentor with trace users (the token losses in semantic segmentation)."""

from mmseg.models.segmentors import EncoderDecoder

from mmvitreg.registry import MODELS

from ..trace_users import DenseTraceUsers


@MODELS.register_module()
class TokenSegmentor(DenseTraceUsers, EncoderDecoder):
    """mmseg's :class:`EncoderDecoder` (decode head, optional neck and auxiliary head) whose backbone's token
    trace feeds auxiliary token losses: ``type='EncoderDecoder'`` -> ``type='mmvitreg.TokenSegmentor'`` plus
    ``aux_losses``, e.g. ::

        model = dict(type='mmvitreg.TokenSegmentor',
                     aux_losses=[dict(type='mmvitreg.DRLoc', in_channels=768, layers=(-1, ), reduction='mean')],
                     ...)  # the EncoderDecoder's arguments, unchanged

    A training step is :meth:`~mmvitreg.models.trace_users.TraceUsers.loss`: one backbone pass with the trace,
    mmseg's own ``loss`` (``decode.loss_ce``, ...), then the users' terms. Inference (``whole`` or ``slide``,
    ``--tta``) is mmseg's, without a trace. Users that need an image-level target are refused
    (:class:`~mmvitreg.models.trace_users.DenseTraceUsers`).

    Args:
        aux_losses (Sequence[dict], optional): The trace users. Defaults to None.
        **kwargs: The arguments of :class:`EncoderDecoder`.
    """
