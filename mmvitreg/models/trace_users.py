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
"""
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from mmengine.model import ModuleList
from torch import Tensor, nn

from mmvitreg.registry import MODELS
from .trace import MixPlan, TokenTrace, TraceRequest, check_trace_user, trace_request_of


def build_user(cfg):
    """A trace user from its config (mmvitreg's ``MODELS``), or the module itself."""
    return cfg if isinstance(cfg, nn.Module) else MODELS.build(cfg)


class TraceUsers:
    """Mixin of a model with a ``backbone`` and trace users (see the module docstring).

    A model calls :meth:`init_trace_users` at the end of its ``__init__``, runs its backbone through
    :meth:`run_backbone` in training and adds its users' terms with :meth:`add_user_losses`.

    Users that need an image-level target (``image_target = True``: TL-Align's transform, MixToken and the
    other token mixes, :class:`~mmvitreg.models.heads.TokenLabelHead`,
    :class:`~mmvitreg.models.losses.PatchMixingLoss`) serve only an image classifier; a model kind
    without one (``image_targets=False``) refuses them when it is built.
    """

    def init_trace_users(self, aux_losses: Optional[Sequence] = None, target_transform=None,
                         fixed_users: Iterable = (), image_targets: bool = True) -> None:
        """Build ``aux_losses`` (into an mmengine ``ModuleList``, so ``init_weights`` reaches each one's
        ``init_cfg``) and ``target_transform``, and check them and ``fixed_users`` (the head, the token
        mix: built by the library's own code) against ``self.backbone``.

        Raises:
            TraceUserError: a user the backbone cannot serve.
            ValueError: more than one target transform, or (``image_targets=False``) a user that needs an
                image-level target.
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
        model = type(self).__name__
        for user in checked:
            if not image_targets and getattr(user, 'image_target', False):
                raise ValueError(f'{type(user).__name__} trains with an image-level target (one label per image), '
                                 f'which {model} does not have (its targets are per pixel or per box): use it in '
                                 'an image classifier (mmvitreg.TokenClassifier), or a token loss that needs no '
                                 'label here (DRLoc, PatchCosineLoss, PatchContrastiveLoss, AttentionCosineLoss)')
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
        """The trace for one forward (None when neither a plan nor a user needs one)."""
        if mix_plan is None and not request.needs_trace:
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

