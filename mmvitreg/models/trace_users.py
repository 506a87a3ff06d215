"""The composition rule of trace users: one skeleton shared by the classifier, the segmentor and the detectors.

A model (``mmvitreg.TokenClassifier``, ``TokenSegmentor``, the ``Token*`` detectors) is its library's model class
with :class:`TraceUsers` mixed in before it, and holds the library's usual parts plus

* ``aux_losses``: modules with a ``trace_request`` (:class:`~mmvitreg.models.trace.TraceRequest`) and
  ``loss(feats, data_samples, trace) -> dict`` of named terms, ``feats`` the backbone's output tuple (before any
  neck), ``trace`` the filled trace (None when no user needs one: such a loss works on any backbone);
* at most one ``target_transform`` (``transform(trace, data_samples)`` rewrites the targets before the model's
  own loss and may return scalars to log) and a batch mix (``train_cfg.mix``).
"""

import copy
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from mmengine.model import ModuleList
from torch import Tensor, nn

from mmvitreg.registry import MODELS

from .trace import MixPlan, TokenTrace, TraceRequest, TraceUserError, check_trace_user, trace_request_of


def build_user(cfg):
    """A trace user from its config (mmvitreg's ``MODELS``), or the module itself, or None."""
    return cfg if cfg is None or isinstance(cfg, nn.Module) else MODELS.build(cfg)


def check_image_target(user, model_name: str, image_targets: bool) -> None:
    """Refuse (:class:`TraceUserError`) a ``user`` that needs an image-level target (``image_target = True``) in
    the model kind ``model_name`` without one (``image_targets=False``)."""
    if not image_targets and getattr(user, 'image_target', False):
        raise TraceUserError(
            f'{type(user).__name__} trains with an image-level target (one label per image), which '
            f'{model_name} does not have (its targets are per pixel or per box): use it in an image '
            'classifier (mmvitreg.TokenClassifier), or a token loss that needs no label here (python '
            'tools/analysis_tools/trace_support.py --model-kind seg lists them)'
        )


class BackboneOutputs(tuple):
    """A backbone's outputs handed to a library's ``loss`` in place of its images: :meth:`TraceUsers.extract_feat`
    takes them through the neck instead of running the backbone again."""


class TraceUsers:
    """Mixin of a model with a ``backbone`` and trace users, put before the library's class
    (``class TokenSegmentor(DenseTraceUsers, EncoderDecoder)``); the model calls :meth:`init_trace_users` at the end
    of its ``__init__``, and its training step is :meth:`loss`."""

    #: whether the model kind has one target per image (a classifier: True); a segmentor or a detector has none
    image_targets = True

    def init_trace_users(
        self, aux_losses: Optional[Sequence] = None, target_transform=None, fixed_users: Iterable = (), mix=None
    ) -> None:
        """Build ``aux_losses`` (an mmengine ``ModuleList``, so ``init_weights`` reaches their ``init_cfg``) and
        ``target_transform``, and check them, ``fixed_users`` (the head) and ``mix`` (the batch mix) against
        ``self.backbone``; also the ``patch_size`` of a plan a stream starts from (TL-Align's initial labels).

        Raises:
            TraceUserError (ValueError): a user the backbone cannot serve, or one that needs an image-level target
                in a kind without one.
            ValueError: more than one target transform.
        """
        if isinstance(target_transform, Sequence):
            if len(target_transform) > 1:
                names = [t.get('type', t) if isinstance(t, dict) else type(t).__name__ for t in target_transform]
                raise ValueError(
                    'a model takes at most one target transform (each replaces the training target); '
                    f'got {len(names)}: {names}'
                )
            target_transform = target_transform[0] if target_transform else None
        self.aux_losses = ModuleList(build_user(cfg) for cfg in aux_losses or ())
        self.target_transform = build_user(target_transform)
        for user in [u for u in [*fixed_users, mix, *self.aux_losses, self.target_transform] if u is not None]:
            check_image_target(user, type(self).__name__, self.image_targets)
            check_trace_user(self.backbone, trace_request_of(user), type(user).__name__)
        self.train_request = TraceRequest.union(trace_request_of(u) for u in self.train_users)
        stream = self.train_request.stream
        if mix is not None and stream is not None:
            user = f'{type(mix).__name__}, the plan {type(stream).__name__} starts from,'
            check_trace_user(self.backbone, TraceRequest(patch_size=mix.patch_size), user)

    @property
    def train_users(self) -> List[nn.Module]:
        """Every trace user of a training forward: the head (when it reads a trace), the auxiliary losses,
        the target transform."""
        head = getattr(self, 'head', None)
        head = head if head is not None and trace_request_of(head).needs_trace else None
        return [u for u in [head, *self.aux_losses, self.target_transform] if u is not None]

    @staticmethod
    def make_trace(
        request: TraceRequest, mix_plan: Optional[MixPlan] = None, data_samples: Optional[list] = None
    ) -> Optional[TokenTrace]:
        """The trace for one forward (None when no user needs one and no plan is left for the backbone to mix:
        a plan that mixed the images in pixel space reaches its users through their traces)."""
        if (mix_plan is None or mix_plan.in_pixels) and not request.needs_trace:
            return None
        return TokenTrace.for_request(request, mix=mix_plan, samples=data_samples)

    def loss(self, inputs: Tensor, data_samples: list, mix_plan: Optional[MixPlan] = None) -> Dict[str, Tensor]:
        """The losses of a training batch in every model kind: the backbone once with the union trace, the target
        transform, the model kind's own terms (:meth:`model_losses`), the transform's scalars, every user's terms
        (:meth:`add_terms`)."""
        trace = self.make_trace(self.train_request, mix_plan, data_samples)
        feats = self.backbone(inputs, trace=trace) if trace is not None else self.backbone(inputs)  # no user: plain
        logged = self.target_transform.transform(trace, data_samples) if self.target_transform is not None else None
        losses = dict(self.model_losses(feats, data_samples, trace))
        if logged:
            self.add_terms(losses, self.target_transform, logged)
        for aux in self.aux_losses:
            self.add_terms(losses, aux, aux.loss(feats, data_samples, trace))
        return losses

    def model_losses(
        self, feats: Tuple[Tensor, ...], data_samples: list, trace: Optional[TokenTrace]
    ) -> Dict[str, Tensor]:
        """The model kind's own terms on the backbone's outputs ``feats``: the library's ``loss`` as it is
        (mmseg's decode and auxiliary heads, mmdet's RPN and RoI heads), given them as :class:`BackboneOutputs`."""
        return super().loss(BackboneOutputs(feats), data_samples)

    def extract_feat(self, inputs, *args, **kwargs):
        """The library's ``extract_feat``; :class:`BackboneOutputs` go through the neck only."""
        if isinstance(inputs, BackboneOutputs):
            return self.neck(inputs) if self.with_neck else inputs
        return super().extract_feat(inputs, *args, **kwargs)

    @staticmethod
    def add_terms(losses: Dict[str, Tensor], user: nn.Module, terms: Dict[str, Tensor]) -> None:
        """Add one user's ``terms`` to ``losses``, refusing a bare ``loss`` and a name already there."""
        for name, value in terms.items():
            if name == 'loss':
                raise KeyError(
                    f'{type(user).__name__} returns a term named {name!r}, the name of the logged '
                    "total: give it its own name (e.g. 'loss_<what>')"
                )
            if name in losses:
                raise KeyError(
                    f'{type(user).__name__} returns the loss {name!r}, which another part of this '
                    f'model already returns: give it another name'
                )
            losses[name] = value


class DenseTraceUsers(TraceUsers):
    """:class:`TraceUsers` of the model kinds without an image-level target (an mmseg segmentor, an mmdet detector):
    the library class's arguments plus ``aux_losses`` and ``target_transform``. Prediction, ``tensor`` mode and
    test-time augmentation are the library's, without a trace. A user that needs an image-level target (TL-Align,
    the token mixes, TokenLabelHead, PatchMixingLoss) is refused (:class:`TraceUserError`) when built, also as
    ``train_cfg.mix`` (which the library would otherwise ignore).
    """

    image_targets = False

    def __init__(self, *args, aux_losses: Optional[Sequence] = None, target_transform=None, **kwargs):
        mix = None
        if kwargs.get('train_cfg') is not None:
            kwargs['train_cfg'] = train_cfg = copy.deepcopy(kwargs['train_cfg'])
            mix = build_user(train_cfg.pop('mix', None))
        super().__init__(*args, **kwargs)
        self.init_trace_users(aux_losses, target_transform, mix=mix)
