"""Image classifier that runs its backbone with a token trace."""
from typing import List, Optional

import torch
from mmpretrain.models import ImageClassifier
from mmpretrain.structures import DataSample

from mmvitreg.registry import MODELS
from ..trace import MixPlan, TokenTrace


@MODELS.register_module()
class TokenClassifier(ImageClassifier):
    """mmpretrain's :class:`ImageClassifier` that passes a :class:`TokenTrace` through the backbone.

    The one wiring all token-level techniques share (MixToken, token labeling, DiversePatch,
    DRLoc, TL-Align): the classifier knows none of them. It builds a trace from

    * the mixing plan drawn by the data preprocessor (``forward(..., mix_plan=...)``, see
      :class:`TokenClsDataPreprocessor`), training only;
    * what the head declares: a head with ``uses_trace = True`` receives the filled trace as
      ``loss(feats, data_samples, trace=...)``, ``predict(feats, data_samples, trace=...)`` and
      ``forward(feats, trace=...)``, and asks for taps with ``trace_token_layers`` /
      ``trace_attn_layers`` (block indices, negative from the end);

    and runs ``backbone(inputs, trace=trace)``. Without a plan and with a head that does not use
    the trace it is exactly an :class:`ImageClassifier`.

    Args:
        train_cfg (dict, optional): As :class:`ImageClassifier` (``augments``, ``probs``) plus
            ``token_mix``: config of a token-mixing augment (e.g. ``dict(type='mmvitreg.MixToken')``)
            handed to the data preprocessor. Defaults to None.
        data_preprocessor (dict, optional): Defaults to
            ``dict(type='mmvitreg.TokenClsDataPreprocessor')``.
        **kwargs: ``backbone``, ``neck``, ``head``, ``pretrained``, ``init_cfg`` as
            :class:`ImageClassifier`.

    Raises:
        TypeError: if a token mix or a trace-using head is combined with a backbone that does not
            take a trace (no ``accepts_trace = True`` attribute).
    """

    def __init__(self,
                 backbone: dict,
                 train_cfg: Optional[dict] = None,
                 data_preprocessor: Optional[dict] = None,
                 **kwargs):
        train_cfg = dict(train_cfg or {})
        token_mix = train_cfg.pop('token_mix', None)
        data_preprocessor = data_preprocessor or {}
        if isinstance(data_preprocessor, dict):
            data_preprocessor = dict(data_preprocessor)
            data_preprocessor.setdefault('type', 'mmvitreg.TokenClsDataPreprocessor')
            if token_mix is not None:
                data_preprocessor['token_mix'] = token_mix
        elif token_mix is not None:
            raise ValueError('train_cfg.token_mix needs a data_preprocessor config (dict), '
                             f'got a built {type(data_preprocessor).__name__}')
        super().__init__(backbone=backbone, train_cfg=train_cfg or None,
                         data_preprocessor=data_preprocessor, **kwargs)
        needs = []
        if token_mix is not None:
            needs.append('train_cfg.token_mix')
        if self.head_uses_trace:
            needs.append(f'the head {type(self.head).__name__}')
        if needs and not getattr(self.backbone, 'accepts_trace', False):
            raise TypeError(f'{" and ".join(needs)} need(s) a backbone that takes a token trace '
                            f'(forward(x, trace), accepts_trace = True); {type(self.backbone).__name__} '
                            "does not: use an mmvitreg ViT-family backbone (e.g. type='mmvitreg.LVViT')")

    @property
    def head_uses_trace(self) -> bool:
        """Whether the head takes the filled trace (``uses_trace = True``)."""
        return self.with_head and getattr(self.head, 'uses_trace', False)

    def make_trace(self, mix_plan: Optional[MixPlan] = None) -> Optional[TokenTrace]:
        """The trace for one forward: the plan in, the head's taps out (None when nothing is needed)."""
        if mix_plan is None and not self.head_uses_trace:
            return None
        if self.head_uses_trace:
            return TokenTrace(mix=mix_plan, token_layers=tuple(getattr(self.head, 'trace_token_layers', ())),
                              attn_layers=tuple(getattr(self.head, 'trace_attn_layers', ())))
        return TokenTrace(mix=mix_plan)

    def extract_feat(self, inputs: torch.Tensor, stage: str = 'neck', trace: Optional[TokenTrace] = None):
        """As :meth:`ImageClassifier.extract_feat`, running the backbone with ``trace`` when given."""
        if trace is None:
            return super().extract_feat(inputs, stage)
        if stage not in ('backbone', 'neck'):
            raise ValueError(f'stage must be "backbone" or "neck" with a trace, got {stage!r}')
        x = self.backbone(inputs, trace=trace)
        if stage == 'neck' and self.with_neck:
            x = self.neck(x)
        return x

    def _head_kwargs(self, trace: Optional[TokenTrace]) -> dict:
        return dict(trace=trace) if self.head_uses_trace else {}

    def forward(self,
                inputs: torch.Tensor,
                data_samples: Optional[List[DataSample]] = None,
                mode: str = 'tensor',
                mix_plan: Optional[MixPlan] = None):
        """As :meth:`ImageClassifier.forward`; ``mix_plan`` (training, ``mode='loss'``) comes from the
        data preprocessor."""
        if mix_plan is not None and mode != 'loss':
            raise ValueError(f'a mixing plan is a training input (mode="loss"), got mode={mode!r}')
        if mode == 'tensor':
            trace = self.make_trace()
            feats = self.extract_feat(inputs, trace=trace)
            return self.head(feats, **self._head_kwargs(trace)) if self.with_head else feats
        if mode == 'loss':
            return self.loss(inputs, data_samples, mix_plan=mix_plan)
        if mode == 'predict':
            return self.predict(inputs, data_samples)
        raise RuntimeError(f'Invalid mode "{mode}".')

    def loss(self, inputs: torch.Tensor, data_samples: List[DataSample],
             mix_plan: Optional[MixPlan] = None) -> dict:
        """Losses of a batch; the backbone mixes its tokens with ``mix_plan`` and the head gets the trace."""
        trace = self.make_trace(mix_plan)
        feats = self.extract_feat(inputs, trace=trace)
        return self.head.loss(feats, data_samples, **self._head_kwargs(trace))

    def predict(self, inputs: torch.Tensor, data_samples: Optional[List[DataSample]] = None,
                **kwargs) -> List[DataSample]:
        """Predictions of a batch (never mixed); the head gets the trace it asks for."""
        trace = self.make_trace()
        feats = self.extract_feat(inputs, trace=trace)
        return self.head.predict(feats, data_samples, **self._head_kwargs(trace), **kwargs)
