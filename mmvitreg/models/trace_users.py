"""The composition rule of trace users, shared by every model kind that runs a backbone with a token trace.

A model (:class:`~mmvitreg.models.classifiers.TokenClassifier`, and the segmentor and detector kinds)
holds its library's usual parts plus

* a list of ``aux_losses``: each a module with ``trace_request`` (a
  :class:`~mmvitreg.models.trace.TraceRequest`, the taps it reads) and
  ``loss(feats, data_samples, trace) -> dict`` of named losses (``loss_drloc``, ``loss_patch_cos``, ...),
  where ``feats`` is the backbone's output tuple (before any neck) and ``trace`` the filled trace (None
  when no user needs one). A loss with an empty request reads only ``feats`` and works on any backbone,
  also on those without a trace (mmpretrain's ResNet, T2T-ViT, ConvNeXt);
* in classification also a ``target_transform`` and a token mix (image-level targets).

:class:`TraceUsers` is the one place that builds the users, checks each against the backbone when the
model is built (:func:`~mmvitreg.models.trace.check_trace_user`: a missing capability or a tap the
backbone cannot serve fails at once, naming user, backbone and fix), takes the union of their requests,
makes one trace per forward and gathers the named losses (unique names, never the bare ``loss``).

:class:`LibraryTraceUsers` puts that rule on a library's own model class (an mmseg segmentor, an mmdet
detector): the library's ``loss`` runs unchanged on the outputs of the one traced backbone run.
"""
import copy
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from mmengine.model import ModuleList
from torch import Tensor, nn

from mmvitreg.registry import MODELS
from .trace import MixPlan, TokenTrace, TraceRequest, TraceUserError, check_trace_user, trace_request_of

#: the trace users that need no image-level target, named in the refusal of one that does
NO_TARGET_USERS = 'DRLoc, PatchCosineLoss, PatchContrastiveLoss, AttentionCosineLoss'


def build_user(cfg):
    """A trace user from its config (mmvitreg's ``MODELS``), or the module itself."""
    return cfg if isinstance(cfg, nn.Module) else MODELS.build(cfg)


class ImageTargetError(TraceUserError, ValueError):
    """A user that trains with an image-level target in a model kind that has none (a segmentor, a detector)."""


def check_image_target(user, model_name: str, image_targets: bool) -> None:
    """Refuse ``user`` when it needs an image-level target (``image_target = True``) and the model kind
    ``model_name`` has none (``image_targets=False``).

    Raises:
        ImageTargetError: the refusal, saying why and what to use instead; ``reason`` is ``'image target'``.
    """
    if not image_targets and getattr(user, 'image_target', False):
        raise ImageTargetError(f'{type(user).__name__} trains with an image-level target (one label per image), '
                               f'which {model_name} does not have (its targets are per pixel or per box): use it '
                               'in an image classifier (mmvitreg.TokenClassifier), or a token loss that needs no '
                               f'label here ({NO_TARGET_USERS})', 'image target')


class TraceUsers:
    """Mixin of a model with a ``backbone`` and trace users (see the module docstring).

    A model calls :meth:`init_trace_users` at the end of its ``__init__``, runs its backbone through
    :meth:`run_backbone` in training and adds its users' terms with :meth:`add_user_losses`.

    Users that need an image-level target (``image_target = True``: TL-Align's transform, MixToken and the
    other token mixes, :class:`~mmvitreg.models.heads.TokenLabelHead`,
    :class:`~mmvitreg.models.losses.PatchMixingLoss`) serve only an image classifier; a model kind
    without one (:attr:`image_targets` False) refuses them when it is built.
    """

    #: whether the model kind has one target per image (a classifier: True); a segmentor or a detector has none
    image_targets = True

    def init_trace_users(self, aux_losses: Optional[Sequence] = None, target_transform=None,
                         fixed_users: Iterable = (), image_targets: Optional[bool] = None) -> None:
        """Build ``aux_losses`` (into an mmengine ``ModuleList``, so ``init_weights`` reaches each one's
        ``init_cfg``) and ``target_transform``, and check them and ``fixed_users`` (the head, the token
        mix: built by the library's own code) against ``self.backbone``. ``image_targets`` defaults to the
        model kind's :attr:`image_targets`.

        Raises:
            TraceUserError: a user the backbone cannot serve.
            ValueError: more than one target transform.
            ImageTargetError (ValueError): ``image_targets=False`` and a user that needs an image-level target.
        """
        if isinstance(target_transform, Sequence):
            if len(target_transform) > 1:
                raise ValueError(f'a model takes at most one target transform (each replaces the training target); '
                                 f'got {len(target_transform)}: {[t.get("type", t) for t in target_transform]}')
            target_transform = target_transform[0] if target_transform else None
        self.aux_losses = ModuleList(build_user(cfg) for cfg in aux_losses or ())
        self.target_transform = build_user(target_transform) if target_transform is not None else None
        checked = [u for u in fixed_users if u is not None] + list(self.aux_losses)
        checked += [self.target_transform] if self.target_transform is not None else []
        image_targets = self.image_targets if image_targets is None else image_targets
        for user in checked:
            check_image_target(user, type(self).__name__, image_targets)
            check_trace_user(self.backbone, trace_request_of(user), type(user).__name__)
        self.train_request = TraceRequest.union(trace_request_of(u) for u in self.train_users)

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

    def add_user_losses(self, losses: Dict[str, Tensor], feats: Tuple[Tensor, ...], data_samples: list,
                        trace: Optional[TokenTrace]) -> Dict[str, Tensor]:
        """Add every auxiliary loss's named terms to ``losses`` (the model's own terms) and return it.

        Raises:
            KeyError: a term named ``loss`` (the logged total) or one another user already returns.
        """
        for aux in self.aux_losses:
            self.add_terms(losses, aux, aux.loss(feats, data_samples, trace))
        return losses

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



#: the mark of backbone outputs the library's loss has read (:class:`LibraryTraceUsers`)
_READ = object()


class LibraryTraceUsers(TraceUsers):
    """:class:`TraceUsers` on a library's own model class, whose ``loss`` runs unchanged.

    Mixed in before the library class (``class TokenSegmentor(LibraryTraceUsers, EncoderDecoder)``); the model
    takes the library class's arguments plus

    * ``aux_losses`` (Sequence[dict], optional): the trace users, each ``loss(feats, data_samples, trace)`` with
      ``feats`` the backbone's outputs before the neck.

    In a training step (``loss``) the backbone runs once, through :meth:`run_backbone` with the union trace;
    the library's ``loss`` then gets its outputs from its one call of ``extract_feat`` (through the neck) and
    computes its terms as always (an mmseg decode and auxiliary head, an mmdet RPN and RoI head); last the
    users add theirs (:meth:`add_user_losses`: a name already returned, e.g. mmdet's ``loss_rpn_cls`` or
    ``s0.loss_cls``, is an error). Prediction, ``tensor`` mode and test-time augmentation call
    ``extract_feat`` as the library does: the backbone runs without a trace.

    These model kinds have no image-level target (:attr:`image_targets` False): a user that needs one (TL-Align,
    MixToken and the other token mixes, TokenLabelHead, PatchMixingLoss) is refused when the model is built,
    also when it is given as ``target_transform`` or ``train_cfg.token_mix`` (which the library would
    otherwise ignore).

    Raises:
        TraceUserError: a user the backbone cannot serve, or (:class:`ImageTargetError`) one that needs an
            image-level target.
    """

    image_targets = False

    def __init__(self, *args, aux_losses: Optional[Sequence] = None, target_transform=None, **kwargs):
        train_cfg = kwargs.get('train_cfg')
        token_mix = None
        if train_cfg is not None and 'token_mix' in train_cfg:
            kwargs['train_cfg'] = train_cfg = copy.deepcopy(train_cfg)
            token_mix = build_user(train_cfg.pop('token_mix'))
        super().__init__(*args, **kwargs)
        self._backbone_outputs = None
        self.init_trace_users(aux_losses, target_transform, fixed_users=[token_mix])

    def extract_feat(self, inputs: Tensor, *args, **kwargs):
        """The library's ``extract_feat``; inside :meth:`loss` the outputs of the backbone run there, through the
        neck (the library's loss reads them once)."""
        feats = self._backbone_outputs
        if feats is None:
            return super().extract_feat(inputs, *args, **kwargs)
        if feats is _READ:
            raise RuntimeError(f"{type(self).__name__}: the library's loss extracts features twice in one step, "
                               'which would run the backbone again without its trace; give this model kind a '
                               'loss that extracts them once')
        self._backbone_outputs = _READ
        return self.neck(feats) if self.with_neck else feats

    def loss(self, inputs: Tensor, data_samples: list) -> Dict[str, Tensor]:
        """The library's losses on one traced backbone run, then every user's named terms."""
        feats, trace = self.run_backbone(inputs, data_samples)
        self._backbone_outputs = feats
        try:
            losses = super().loss(inputs, data_samples)
            read = self._backbone_outputs is _READ
        finally:
            self._backbone_outputs = None
        if not read:
            raise RuntimeError(f"{type(self).__name__}: the library's loss did not extract features, so the traced "
                               'backbone run went unused')
        return self.add_user_losses(losses, feats, data_samples, trace)
