"""Image classifier that runs its backbone with one token trace shared by several trace users."""

from typing import Dict, List, Optional, Sequence, Union

import torch
from mmpretrain.models import ImageClassifier
from mmpretrain.structures import DataSample

from mmvitreg.registry import MODELS

from ..trace import MixPlan, TokenTrace, TraceRequest, trace_request_of
from ..trace_users import BackboneOutputs, TraceUsers


@MODELS.register_module()
class TokenClassifier(TraceUsers, ImageClassifier):
    """mmpretrain's :class:`ImageClassifier` with a token trace and several trace users.

    The token-level techniques meet here; the classifier knows none of them (the composition rule:
    :class:`~mmvitreg.models.trace_users.TraceUsers`, shared with the segmentor and detector kinds). A model holds:

    * one ``head`` (any mmpretrain head; one with a ``trace_request`` gets ``trace=`` in ``loss/predict/forward``);
    * ``aux_losses`` (``loss(feats, data_samples, trace) -> dict`` of named losses, ``feats`` the backbone's
      outputs before the neck); one with ``ensemble = True`` also joins the prediction (:meth:`predict`);
    * at most one ``target_transform`` (``transform(trace, data_samples)``: replaces each sample's ``gt_score``
      before the head's loss; may return scalars to log, e.g. TL-Align);
    * a batch mix (``train_cfg.mix``, e.g. MixToken), whose plan the data preprocessor draws.

    The trace is filled once per training forward with the union of all requests; prediction builds one only
    for a head that asks. Every user is checked against the backbone when the model is built.

    Args:
        backbone (dict): The backbone; a trace user needs one with a ``trace_spec`` (an mmvitreg backbone).
        aux_losses (Sequence[dict], optional): Auxiliary token losses. Defaults to None.
        target_transform (dict, optional): The target transform. Defaults to None.
        train_cfg (dict, optional): As :class:`ImageClassifier` (``augments``, ``probs``) plus
            ``mix``: config of a batch mix (:class:`~mmvitreg.models.mixing.BatchMix`, e.g.
            ``dict(type='mmvitreg.MixToken')``) handed to the data preprocessor. Defaults to None.
        data_preprocessor (dict, optional): Defaults to
            ``dict(type='mmvitreg.TokenClsDataPreprocessor')``.
        **kwargs: ``neck``, ``head``, ``pretrained``, ``init_cfg`` as :class:`ImageClassifier`.

    Raises:
        TraceUserError (ValueError): a user the backbone cannot serve (see above).
        ValueError: more than one target transform.
    """

    def __init__(
        self,
        backbone: dict,
        aux_losses: Optional[Sequence[dict]] = None,
        target_transform: Optional[Union[dict, Sequence[dict]]] = None,
        train_cfg: Optional[dict] = None,
        data_preprocessor: Optional[dict] = None,
        **kwargs,
    ):
        train_cfg = dict(train_cfg or {})
        mix = train_cfg.pop('mix', None)
        data_preprocessor = data_preprocessor or {}
        if isinstance(data_preprocessor, dict):
            data_preprocessor = dict(data_preprocessor)
            data_preprocessor.setdefault('type', 'mmvitreg.TokenClsDataPreprocessor')
            if mix is not None:
                data_preprocessor['mix'] = mix
        elif mix is not None:
            raise ValueError(f'train_cfg.mix needs data_preprocessor as a dict, got {type(data_preprocessor).__name__}')
        super().__init__(backbone=backbone, train_cfg=train_cfg or None, data_preprocessor=data_preprocessor, **kwargs)
        self.init_trace_users(
            aux_losses,
            target_transform,
            fixed_users=[self.head if self.with_head else None],
            mix=getattr(self.data_preprocessor, 'mix', None),
        )

    @property
    def head_request(self) -> TraceRequest:
        """What the head asks of the trace (empty for a plain mmpretrain head)."""
        return trace_request_of(self.head) if self.with_head else TraceRequest()

    def extract_feat(self, inputs: torch.Tensor, stage: str = 'neck', trace: Optional[TokenTrace] = None):
        """As :meth:`ImageClassifier.extract_feat`, running the backbone with ``trace`` when given."""
        if trace is None:
            return super().extract_feat(inputs, stage)
        if stage != 'neck':
            raise ValueError(f'a trace runs the backbone and the neck (stage="neck"), got stage={stage!r}')
        return super().extract_feat(BackboneOutputs(self.backbone(inputs, trace=trace)))

    def _head_kwargs(self, trace: Optional[TokenTrace]) -> dict:
        return dict(trace=trace) if self.head_request.needs_trace else {}

    def forward(
        self,
        inputs: torch.Tensor,
        data_samples: Optional[List[DataSample]] = None,
        mode: str = 'tensor',
        mix_plan: Optional[MixPlan] = None,
    ):
        """As :meth:`ImageClassifier.forward`; ``mix_plan`` (training, ``mode='loss'``) comes from the
        data preprocessor."""
        if mix_plan is not None and mode != 'loss':
            raise ValueError(f'a mixing plan is a training input (mode="loss"), got mode={mode!r}')
        if mode == 'loss':
            return self.loss(inputs, data_samples, mix_plan=mix_plan)
        if mode == 'tensor' and self.head_request.needs_trace:
            trace = self.make_trace(self.head_request)
            return self.head(self.extract_feat(inputs, trace=trace), trace=trace)
        return super().forward(inputs, data_samples, mode)

    def model_losses(
        self, feats, data_samples: List[DataSample], trace: Optional[TokenTrace]
    ) -> Dict[str, torch.Tensor]:
        """The head's terms on the backbone's outputs ``feats`` through the neck (a head that reads a trace gets
        it), named as the head names them (mmpretrain's heads: ``loss``)."""
        return self.head.loss(self.extract_feat(BackboneOutputs(feats)), data_samples, **self._head_kwargs(trace))

    def parse_losses(self, losses: Dict[str, torch.Tensor]):
        """mmengine's ``parse_losses`` (the total of every ``loss*`` term, logged as ``loss``), with the head's
        ``loss`` logged as ``loss_cls`` (under ``loss`` it would overwrite the total in the log).

        Raises:
            KeyError: ``loss`` and ``loss_cls`` both returned.
        """
        if 'loss' in losses:
            if 'loss_cls' in losses:
                raise KeyError(
                    "the head returns 'loss' and a part of the model returns 'loss_cls', the name the "
                    "head's 'loss' is logged under: rename that term"
                )
            losses = {('loss_cls' if name == 'loss' else name): value for name, value in losses.items()}
        return super().parse_losses(losses)

    def predict(
        self, inputs: torch.Tensor, data_samples: Optional[List[DataSample]] = None, **kwargs
    ) -> List[DataSample]:
        """Predictions of a batch (never mixed); the head gets the trace it asks for. The scores are the mean of
        the head's and every ``ensemble`` auxiliary loss's ``ensemble_scores(trace)`` ``(B, K)``."""
        ensemble = [aux for aux in self.aux_losses if getattr(aux, 'ensemble', False)]
        trace = self.make_trace(TraceRequest.union([self.head_request] + [trace_request_of(a) for a in ensemble]))
        feats = self.extract_feat(inputs, trace=trace)
        samples = self.head.predict(feats, data_samples, **self._head_kwargs(trace), **kwargs)
        if ensemble:
            scores = torch.stack([s.pred_score for s in samples])
            scores = (scores + sum(aux.ensemble_scores(trace) for aux in ensemble)) / (1 + len(ensemble))
            for sample, score in zip(samples, scores):
                sample.set_pred_score(score).set_pred_label(score.argmax(keepdim=True))
        return samples
