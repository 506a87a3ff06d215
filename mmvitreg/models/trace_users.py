"""The composition rule of trace users: one skeleton shared by the classifier, the segmentor and the detectors.

A model (:class:`~mmvitreg.models.classifiers.TokenClassifier`, :class:`~mmvitreg.models.segmentors.TokenSegmentor`,
the ``mmvitreg.Token*`` detectors) is its library's model class with :class:`TraceUsers` mixed in before it; it
holds the library's usual parts plus

* a list of ``aux_losses``: each a module with ``trace_request`` (a
  :class:`~mmvitreg.models.trace.TraceRequest`, the taps it reads) and
  ``loss(feats, data_samples, trace) -> dict`` of named losses (``loss_drloc``, ``loss_patch_cos``, ...),
  where ``feats`` is the backbone's output tuple (before any neck) and ``trace`` the filled trace (None
  when no user needs one). A loss that asks for no trace reads only ``feats`` and works on any backbone,
  also on those without a trace (mmpretrain's ResNet, T2T-ViT, ConvNeXt);
* at most one ``target_transform`` (``transform(trace, data_samples)`` rewrites the targets before the model's
  own loss and may return scalars to log) and a batch mix (``train_cfg.mix``).

:class:`TraceUsers` builds the users, checks each against the backbone when the model is built
(:func:`~mmvitreg.models.trace.check_trace_user`: a missing capability, a tap the backbone cannot serve or a
width it does not have fails at once, naming user, backbone and fix), and runs one training step the same way
in every model kind (:meth:`TraceUsers.loss`): the backbone once with the union of the requests, the target
transform, the model kind's own losses on those outputs (:meth:`TraceUsers.model_losses`: the library's
``loss`` unchanged, handed the outputs as :class:`BackboneOutputs`), then every user's named terms.

Users that need an image-level target (``image_target = True``) serve only a model kind that has one
(:attr:`TraceUsers.image_targets`); the others refuse them when built.
"""
import copy
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from mmengine.model import ModuleList
from torch import Tensor, nn

from mmvitreg.registry import MODELS
from .trace import MixPlan, TokenTrace, TraceRequest, TraceUserError, check_trace_user, trace_request_of


def build_user(cfg):
    """A trace user from its config (mmvitreg's ``MODELS``), or the module itself."""
    return cfg if isinstance(cfg, nn.Module) else MODELS.build(cfg)


def check_image_target(user, model_name: str, image_targets: bool) -> None:
    """Refuse ``user`` when it needs an image-level target (``image_target = True``) and the model kind
    ``model_name`` has none (``image_targets=False``).

    Raises:
        TraceUserError (ValueError): the refusal, saying why and what to use instead.
    """
    if not image_targets and getattr(user, 'image_target', False):
        raise TraceUserError(f'{type(user).__name__} trains with an image-level target (one label per image), which '
                             f'{model_name} does not have (its targets are per pixel or per box): use it in an image '
                             'classifier (mmvitreg.TokenClassifier), or a token loss that needs no label here (python '
                             'tools/analysis_tools/trace_support.py --model-kind seg lists them)')


class BackboneOutputs(tuple):
    """A backbone's outputs handed to a library's ``loss`` in place of its images: :meth:`TraceUsers.extract_feat`
    takes them through the neck instead of running the backbone again."""


class TraceUsers:
    """Mixin of a model with a ``backbone`` and trace users (see the module docstring), put before the library's
    class: ``class TokenSegmentor(DenseTraceUsers, EncoderDecoder)``.

    A model calls :meth:`init_trace_users` at the end of its ``__init__``; its training step is :meth:`loss`.
    """

    #: whether the model kind has one target per image (a classifier: True); a segmentor or a detector has none
    image_targets = True

    def init_trace_users(self, aux_losses: Optional[Sequence] = None, target_transform=None,
                         fixed_users: Iterable = (), mix=None) -> None:
        """Build ``aux_losses`` (into an mmengine ``ModuleList``, so ``init_weights`` reaches each one's
        ``init_cfg``) and ``target_transform``, and check them, ``fixed_users`` (the head: built by the library's
        own code) and ``mix`` (the batch mix that draws the plans, built by the data preprocessor) against
        ``self.backbone``; a plan a stream starts from (TL-Align's initial labels) must lie on the backbone's
        token grid, so its ``patch_size`` is checked then too.

        Raises:
            TraceUserError (ValueError): a user the backbone cannot serve (also a plan the backbone mixes, or a
                stream starts from, of another patch size than the backbone's), or one that needs an image-level
                target in a kind without one.
            ValueError: more than one target transform.
        """
        if isinstance(target_transform, Sequence):
            if len(target_transform) > 1:
                raise ValueError(f'a model takes at most one target transform (each replaces the training target); '
                                 f'got {len(target_transform)}: '
                                 f'{[t.get("type", t) if isinstance(t, dict) else type(t).__name__ for t in target_transform]}')
            target_transform = target_transform[0] if target_transform else None
        self.aux_losses = ModuleList(build_user(cfg) for cfg in aux_losses or ())
        self.target_transform = build_user(target_transform) if target_transform is not None else None
        checked = [u for u in [*fixed_users, mix] if u is not None] + list(self.aux_losses)
        checked += [self.target_transform] if self.target_transform is not None else []
        for user in checked:
            check_image_target(user, type(self).__name__, self.image_targets)
            check_trace_user(self.backbone, trace_request_of(user), type(user).__name__)
        self.train_request = TraceRequest.union(trace_request_of(u) for u in self.train_users)
        stream = self.train_request.stream
        if mix is not None and stream is not None:
            check_trace_user(self.backbone, TraceRequest(patch_size=mix.patch_size),
                             f'{type(mix).__name__}, the plan {type(stream).__name__} starts from,')

    @property
    def train_users(self) -> List[nn.Module]:
        """Every trace user of a training forward: the head (when it reads a trace), the auxiliary losses,
        the target transform."""
        head = getattr(self, 'head', None)
        users = [head] if head is not None and trace_request_of(head).needs_trace else []
        users += list(self.aux_losses)
        return users + ([self.target_transform] if self.target_transform is not None else [])

    @staticmethod
    def make_trace(request: TraceRequest, mix_plan: Optional[MixPlan] = None,
                   data_samples: Optional[list] = None) -> Optional[TokenTrace]:
        """The trace for one forward (None when no user needs one and no plan is left for the backbone to mix:
        a plan that mixed the images in pixel space reaches its users through their traces)."""
        if (mix_plan is None or mix_plan.in_pixels) and not request.needs_trace:
            return None
        return TokenTrace.for_request(request, mix=mix_plan, samples=data_samples)

    def run_backbone(self, inputs: Tensor, data_samples: Optional[list] = None,
                     mix_plan: Optional[MixPlan] = None) -> Tuple[Tuple[Tensor, ...], Optional[TokenTrace]]:
        """The backbone's outputs for a training batch and the trace filled with the union request (None
        when no user needs one: the backbone then runs as an ordinary backbone)."""
        trace = self.make_trace(self.train_request, mix_plan, data_samples)
        feats = self.backbone(inputs, trace=trace) if trace is not None else self.backbone(inputs)
        return feats, trace

    def loss(self, inputs: Tensor, data_samples: list, mix_plan: Optional[MixPlan] = None) -> Dict[str, Tensor]:
        """The losses of a training batch, the same way in every model kind: the backbone runs once with the
        union trace, the target transform rewrites the targets, then come the model kind's own terms
        (:meth:`model_losses`), the transform's logged scalars and every auxiliary loss's named terms.

        Raises:
            KeyError: a user's term named ``loss`` or as a term already returned (the library's included).
        """
        feats, trace = self.run_backbone(inputs, data_samples, mix_plan)
        logged = self.target_transform.transform(trace, data_samples) if self.target_transform is not None else None
        losses = dict(self.model_losses(feats, data_samples, trace))
        if logged:
            self.add_terms(losses, self.target_transform, logged)
        for aux in self.aux_losses:
            self.add_terms(losses, aux, aux.loss(feats, data_samples, trace))
        return losses

    def model_losses(self, feats: Tuple[Tensor, ...], data_samples: list,
                     trace: Optional[TokenTrace]) -> Dict[str, Tensor]:
        """The model kind's own terms on the backbone's outputs ``feats``: the library's ``loss`` as it is
        (mmseg's decode and auxiliary heads, mmdet's RPN and RoI heads), given them as :class:`BackboneOutputs`."""
        return super().loss(BackboneOutputs(feats), data_samples)

    def extract_feat(self, inputs, *args, **kwargs):
        """The library's ``extract_feat``; :class:`BackboneOutputs` (in :meth:`model_losses`) go through the neck
        only."""
        if isinstance(inputs, BackboneOutputs):
            return self.neck(inputs) if self.with_neck else inputs
        return super().extract_feat(inputs, *args, **kwargs)

    @staticmethod
    def add_terms(losses: Dict[str, Tensor], user: nn.Module, terms: Dict[str, Tensor]) -> None:
        """Add one user's ``terms`` to ``losses``, refusing a bare ``loss`` and a name already there."""
        for name, value in terms.items():
            if name == 'loss':
                raise KeyError(f'{type(user).__name__} returns a term named {name!r}, the name of the logged '
                               "total: give it its own name (e.g. 'loss_<what>')")
            if name in losses:
                raise KeyError(f'{type(user).__name__} returns the loss {name!r}, which another part of this '
                               f'model already returns: give it another name')
            losses[name] = value


class DenseTraceUsers(TraceUsers):
    """:class:`TraceUsers` of the model kinds without an image-level target (an mmseg segmentor, an mmdet
    detector), which take the library class's arguments plus

    * ``aux_losses`` (Sequence[dict], optional): the trace users, each ``loss(feats, data_samples, trace)`` with
      ``feats`` the backbone's outputs before the neck;
    * ``target_transform`` (dict, optional): as in classification.

    A training step is :meth:`TraceUsers.loss`; prediction, ``tensor`` mode and test-time augmentation are the
    library's, without a trace. A user that needs an image-level target (TL-Align, MixToken and the other token
    mixes, TokenLabelHead, PatchMixingLoss) is refused when the model is built, also as ``target_transform`` or
    ``train_cfg.mix`` (which the library would otherwise ignore).

    Raises:
        TraceUserError (ValueError): a user the backbone cannot serve, or one that needs an image-level target.
    """

    image_targets = False

    def __init__(self, *args, aux_losses: Optional[Sequence] = None, target_transform=None, **kwargs):
        mix = None
        if kwargs.get('train_cfg') is not None:
            kwargs['train_cfg'] = train_cfg = copy.deepcopy(kwargs['train_cfg'])
            mix = train_cfg.pop('mix', None)
            mix = build_user(mix) if mix is not None else None
        super().__init__(*args, **kwargs)
        self.init_trace_users(aux_losses, target_transform, mix=mix)
