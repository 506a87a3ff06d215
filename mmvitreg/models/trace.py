"""The token trace: what travels with the tokens through an mmvitreg backbone.

All techniques of this package need something to ride along with the tokens:

* MixToken / TL-Align mix the token maps of two images right after patch embedding, before the
  position embedding (the *mixing plan* goes in);
* token labeling, DiversePatch, DRLoc and the diagnostics read the tokens of chosen blocks and,
  for some, their attention maps (the *taps* come out).

A backbone's ``forward(x, trace=None)`` takes an optional :class:`TokenTrace`. Without one the
backbone is an ordinary backbone (same outputs, fused attention, no extra work). With one, it
applies ``trace.mix`` to the patch-token map, records ``trace.grid`` / ``trace.num_extra_tokens``,
the token grid of every block (``trace.grids``) and, for windowed backbones, every block's
:class:`WindowLayout` (``trace.windows``), and records into ``trace.tokens`` / ``trace.attn`` the
outputs / attention maps of the blocks listed in ``trace.token_layers`` / ``trace.attn_layers``.

**Trace users.** Whatever reads a trace (a head, an auxiliary loss, a target transform of
:class:`~mmvitreg.models.classifiers.TokenClassifier`) declares a :class:`TraceRequest`: the blocks
it taps and the capabilities it needs. A backbone that takes a trace says what it serves in
``trace_serves`` (a subset of :data:`CAPABILITIES`) and how many blocks it has in
``num_trace_layers``. :func:`check_trace_user` compares the two when the model is built, so a
mismatch fails at once with both names; the classifier fills one trace per forward with the union
of all requests. A user whose request is empty reads only the backbone's outputs and works with any
backbone, including those with no trace (mmpretrain's ResNet, T2T-ViT, ConvNeXt).

**Streams: values that ride along with the tokens.** A user that propagates per-token values with
each block's head-averaged attention (TL-Align's labels, paper Eq. 9) need not read the
``(B, heads, N, N)`` maps: it gives its request a :class:`TokenStream`, and the backbone hands each
block's attention the stream's values as a :class:`~mmvitreg.models.layers.Ride`. A fused attention applies
``mean_h Softmax(q_h k_h^T)`` to the values without keeping a map for the backward: in the same
fused kernel call as its tokens (extra value channels, on the CPU) or from its detached ``q, k``
beside it; an explicit one (re-attention, talking heads, a tapped map, attention dropout in
training) multiplies them by its map before dropout. The stream updates its values between blocks
(``stream.step``) and at Swin's patch merging (``stream.resize``); ``trace.streamed[i]`` holds them
after block ``i``.
"""
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, Optional, Protocol, Sequence, Tuple

from torch import Tensor

from .layers import WindowLayout

#: What a trace-taking backbone can serve, and what a user can ask for.
CAPABILITIES = {
    'grid': 'fills the token grid and the number of extra tokens',
    'mix': 'mixes the patch tokens with a MixPlan right after the patch embedding',
    'tokens': 'records the output tokens of chosen blocks',
    'attn': 'records the attention maps of chosen blocks',
    'cls_token': 'has a class token in front of the patch tokens',
    'windows': 'attends within (shifted) windows, described by a WindowLayout per block',
    'stream': 'carries the values of a TokenStream through the attention of every block (a Ride per block)',
    'embed': 'records the patch-embedding output (after any token mix, before the position embedding)',
    'final': 'records the last block\'s tokens after the backbone\'s final norm',
    'stages': 'records every stage\'s output tokens after its down-sampling (hierarchical backbones)',
    'isotropic': 'keeps every block on the patch grid of the embedding (no down-sampling), so patch i '
                 'is the same patch in every block',
}


@dataclass
class MixPlan:
    """A two-image token-mixing plan, drawn once per batch by a batch augment.

    Every mixed token is ``m * own + (1 - m) * partner``, so every token label stays of the form
    ``w * y_own + (1 - w) * y_partner``.

    Args:
        index (Tensor): ``(B,)`` long, the partner of each sample in the batch.
        mask (Tensor): ``(B, Hg, Wg)`` float on the token grid, 1 where the token is the sample's
            own, 0 where it comes from the partner (values in between are allowed).
        pixel_mask (Tensor, optional): ``(B, H, W)`` float, set when the data preprocessor mixed the
            *images* in pixel space with it (CutMix for TL-Align, :meth:`mix_images`); backbones then
            leave the tokens alone and ``mask`` is each token's share of own pixels. None (default):
            the backbone mixes the patch tokens (MixToken).
    """

    index: Tensor
    mask: Tensor
    pixel_mask: Optional[Tensor] = None

    @property
    def in_pixels(self) -> bool:
        """Whether the images were mixed in pixel space (the backbone must not mix the tokens again)."""
        return self.pixel_mask is not None

    def mix_images(self, x: Tensor) -> Tensor:
        """Mix images ``(B, C, H, W)`` with :attr:`pixel_mask`: ``m * x + (1 - m) * x[index]``."""
        if self.pixel_mask is None:
            raise ValueError('this plan mixes tokens inside the backbone and has no pixel_mask')
        if tuple(x.shape[-2:]) != tuple(self.pixel_mask.shape[-2:]):
            raise ValueError(f'the pixel mask is {tuple(self.pixel_mask.shape[-2:])} but the images are '
                             f'{tuple(x.shape[-2:])}')
        m = self.pixel_mask.to(x.dtype).unsqueeze(1)
        return x * m + x[self.index] * (1 - m)

    @property
    def lam(self) -> Tensor:
        """``(B,)`` share of each sample's own tokens: the mean of its mask (MixToken Eq. 10)."""
        return self.mask.flatten(1).mean(1)

    def _check_grid(self, grid: Tuple[int, int]):
        if tuple(grid) != tuple(self.mask.shape[-2:]):
            raise ValueError(f'the mixing mask covers a {tuple(self.mask.shape[-2:])} token grid but the '
                             f'map to mix is {tuple(grid)}')

    def mix(self, x: Tensor) -> Tensor:
        """Mix a token map ``(B, C, Hg, Wg)`` or a dense map ``(B, K, Hg, Wg)`` with the plan."""
        self._check_grid(x.shape[-2:])
        m = self.mask.to(x.dtype).unsqueeze(1)
        return x * m + x[self.index] * (1 - m)

    def mix_tokens(self, x: Tensor, grid: Tuple[int, int]) -> Tensor:
        """Mix a token sequence ``(B, Hg * Wg, C)`` laid out row-major on ``grid``."""
        self._check_grid(grid)
        m = self.mask.to(x.dtype).flatten(1).unsqueeze(-1)
        return x * m + x[self.index] * (1 - m)

    def mix_labels(self, y: Tensor) -> Tensor:
        """Mix per-image labels ``(B, K)`` by each sample's own share (MixToken Eq. 10).

        ``y_hat = lam * y + (1 - lam) * y[index]`` with ``lam`` the mask mean; integer (one-hot)
        labels come back as floats.
        """
        y = y if y.is_floating_point() else y.float()
        lam = self.lam.to(y.dtype).unsqueeze(1)
        return y * lam + y[self.index] * (1 - lam)


class TokenStream(Protocol):
    """A user's per-token values, carried through the blocks by the backbone (see the module docstring).

    Shapes: values ``(B, N, D)`` on a block's token grid, extra tokens first (``N = num_extra_tokens
    + H * W``); ``mixed`` the same, from the block's :class:`~mmvitreg.models.layers.Ride`.
    """

    def start(self, trace: 'TokenTrace') -> Tensor:
        """The values of the tokens that enter the first block (``trace.grid``, ``trace.mix`` are set)."""

    def step(self, trace: 'TokenTrace', layer: int, values: Tensor, mixed: Tensor) -> Tensor:
        """The values after block ``layer``, from those before it and what its attention ``mixed``."""

    def resize(self, values: Tensor, grid: Tuple[int, int], new_grid: Tuple[int, int]) -> Tensor:
        """The values after a downsampling between blocks (Swin's patch merging) from ``grid`` to ``new_grid``."""


@dataclass(frozen=True)
class TraceRequest:
    """What one trace user asks of the backbone.

    Args:
        token_layers (Tuple[int, ...]): Blocks whose output tokens it reads (negative indices count
            from the last block).
        attn_layers (Tuple[int, ...]): Blocks whose attention maps it reads.
        needs (FrozenSet[str]): Further capabilities it relies on (keys of :data:`CAPABILITIES`,
            e.g. ``{'grid'}`` for a user that reads only the grid, ``{'cls_token'}``). ``'tokens'`` /
            ``'attn'`` / ``'stream'`` are implied by the layer lists and the stream.
        stream (TokenStream, optional): Values the backbone carries through every block for the user
            (at most one stream per model).
        token_channels (Tuple[int, ...]): The channels the user expects of each ``token_layers`` tap
            (one per tap; empty: not checked), compared with the backbone's ``trace_channels`` when the
            model is built. Only checked, not merged by :meth:`union`.
    """

    token_layers: Tuple[int, ...] = ()
    attn_layers: Tuple[int, ...] = ()
    needs: FrozenSet[str] = frozenset()
    stream: Optional[TokenStream] = None
    token_channels: Tuple[int, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, 'token_layers', tuple(self.token_layers))
        object.__setattr__(self, 'attn_layers', tuple(self.attn_layers))
        object.__setattr__(self, 'needs', frozenset(self.needs))
        object.__setattr__(self, 'token_channels', tuple(self.token_channels))
        if self.token_channels and len(self.token_channels) != len(self.token_layers):
            raise ValueError(f'token_channels {self.token_channels} need one entry per token layer {self.token_layers}')
        unknown = self.needs - set(CAPABILITIES)
        if unknown:
            raise ValueError(f'unknown trace capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}')

    @property
    def capabilities(self) -> FrozenSet[str]:
        """Everything the backbone must serve: :attr:`needs` plus what the taps imply."""
        implied = {'grid'} if self.needs else set()
        implied |= {'tokens'} if self.token_layers else set()
        implied |= {'attn'} if self.attn_layers else set()
        implied |= {'grid', 'stream'} if self.stream is not None else set()
        return self.needs | implied

    @property
    def needs_trace(self) -> bool:
        """Whether the user reads a trace at all (an empty request reads only the backbone outputs)."""
        return bool(self.capabilities)

    @staticmethod
    def union(requests: Iterable['TraceRequest']) -> 'TraceRequest':
        """One request serving all ``requests`` (layers in first-seen order)."""
        requests = list(requests)
        merge = lambda attr: tuple(dict.fromkeys(i for r in requests for i in getattr(r, attr)))  # noqa: E731
        streams = list(dict.fromkeys(id(r.stream) for r in requests if r.stream is not None))
        if len(streams) > 1:
            raise ValueError(f'a backbone carries one token stream, but {len(streams)} trace users bring one: '
                             + ', '.join(type(r.stream).__name__ for r in requests if r.stream is not None))
        stream = next((r.stream for r in requests if r.stream is not None), None)
        return TraceRequest(merge('token_layers'), merge('attn_layers'),
                            frozenset().union(*(r.needs for r in requests)), stream)


def trace_request_of(user) -> TraceRequest:
    """The :class:`TraceRequest` of a trace user (an empty one for objects that declare none)."""
    return getattr(user, 'trace_request', None) or TraceRequest()


class TraceUserError(Exception):
    """A trace user the backbone cannot serve (:func:`check_trace_user`); raised as one of the
    subclasses below, which are also a ``TypeError``, ``IndexError`` or ``ValueError``.

    Args:
        message (str): The error, naming the user, the backbone and the fix.
        reason (str): The same in a few words, for a table cell (``'no cls_token'``).
    """

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class TraceCapabilityError(TraceUserError, TypeError):
    """The backbone takes no trace or lacks a capability the user needs."""


class TraceTapError(TraceUserError, IndexError):
    """The user taps a block the backbone does not have."""


class TraceStreamError(TraceUserError, ValueError):
    """The user's stream is meant for another number of blocks."""


class TraceChannelError(TraceUserError, ValueError):
    """A tapped block's tokens have another width than the user expects."""


def check_trace_user(backbone, request: TraceRequest, user_name: str) -> None:
    """Fail, naming the user and the backbone, when ``backbone`` cannot serve ``request``.

    Every error is a :class:`TraceUserError` with ``reason``, a few words for a table cell
    (``'no trace'``, ``'no cls_token'``, ``'only 12 blocks'``).

    Raises:
        TraceCapabilityError (TypeError): the backbone takes no trace, or lacks a capability the user needs.
        TraceTapError (IndexError): a tapped block does not exist in the backbone.
        TraceStreamError (ValueError): the user's stream is meant for another number of blocks (its
            ``num_layers``, when it gives one).
        TraceChannelError (ValueError): a tapped block's tokens are not as wide as the user's
            ``token_channels`` (backbones that give their ``trace_channels``).
    """
    if not request.needs_trace:
        return
    backbone_name = type(backbone).__name__
    if not getattr(backbone, 'accepts_trace', False):
        raise TraceCapabilityError(f'{user_name} needs a backbone that takes a token trace '
                                   f'({sorted(request.capabilities)}); {backbone_name} does not: use an mmvitreg '
                                   'backbone (mmvitreg.VisionTransformer, DeepViT, LVViT, SwinTransformer, CvT) or a '
                                   'user that reads only the backbone outputs', 'no trace')
    missing = request.capabilities - set(backbone.trace_serves)
    if missing:
        raise TraceCapabilityError(f'{user_name} needs {sorted(missing)} ('
                                   + '; '.join(CAPABILITIES[m] for m in sorted(missing))
                                   + f') but {backbone_name} serves only {sorted(backbone.trace_serves)}',
                                   'no ' + ', '.join(sorted(missing)))
    num_layers = backbone.num_trace_layers
    for kind, layers in (('tokens', request.token_layers), ('attention maps', request.attn_layers)):
        try:
            TokenTrace.resolve(layers, num_layers)
        except IndexError as e:
            raise TraceTapError(f'{user_name} taps the {kind} of a block that {backbone_name} does not have: {e}',
                                f'only {num_layers} blocks') from None
    channels = getattr(backbone, 'trace_channels', None)
    if request.token_channels and channels is not None:
        actual = [channels[i] for i in TokenTrace.resolve(request.token_layers, num_layers)]
        if list(request.token_channels) != actual:
            raise TraceChannelError(f'{user_name} expects {list(request.token_channels)} channels in the tokens of '
                                    f'blocks {list(request.token_layers)} but {backbone_name} has {actual}: set its '
                                    f'in_channels to {actual}', f'{", ".join(map(str, actual))} channels')
    stream_layers = getattr(request.stream, 'num_layers', None)  # None: the stream takes the trace's depth
    if stream_layers is not None and stream_layers != num_layers:
        raise TraceStreamError(f'{user_name} carries its stream through num_layers={stream_layers} blocks but '
                               f'{backbone_name} has {num_layers}: set num_layers={num_layers} or leave it out '
                               '(the depth is taken from the backbone)', f'{num_layers} blocks, not {stream_layers}')


@dataclass
class TokenTrace:
    """Travels with one batch through a backbone's forward.

    In:
        mix (MixPlan, optional): mixing plan applied to the patch-token map after the patch
            embedding and before the position embedding.
        token_layers (Sequence[int]): blocks whose output tokens to record (negative indices count
            from the last block; a hierarchical backbone numbers its blocks across stages).
        attn_layers (Sequence[int]): blocks whose attention maps to record; only these blocks leave
            the fused attention kernel.
        stream (TokenStream, optional): values to carry through every block (see the module docstring).
        labels (Tensor, optional): ``(B,)`` class indices of the batch, set by the classifier in training
            (for a stream that starts from the labels).

    Out (filled by the backbone):
        grid (Tuple[int, int]): the patch-token grid ``(Hg, Wg)`` the plan mixes.
        num_layers (int): the backbone's number of blocks (for negative indices, see :meth:`index`).
        num_extra_tokens (int): tokens before the patch tokens (1 for a cls token, else 0).
        grids (Dict[int, Tuple[int, int]]): every block -> the grid of its output tokens (all equal
            to ``grid`` in a ViT; a Swin stage's grid in a Swin).
        windows (Dict[int, WindowLayout]): every block of a windowed backbone -> its window layout.
        tokens (Dict[int, Tensor]): block index (non-negative) -> ``(B, N, C)`` tokens after the
            block, extra tokens first, ``N = num_extra_tokens + H * W`` on the block's grid.
        attn (Dict[int, Tensor]): block index (non-negative) -> the block's attention map:
            ``(B, heads, N, N)`` in a ViT (after softmax and before attention dropout; for
            re-attention after the head transform and its norm, which follow the dropout);
            ``(B * nW, heads, w * w, w * w)`` per window in a Swin, before attention dropout (place
            it on the grid with ``windows[i]``).
        streamed (Dict[int, Tensor]): every block -> the stream's values after it ``(B, N, D)``.
        embed (Tensor, optional): ``(B, H * W, C)`` patch-embedding output, after the token mix and
            before the position embedding (backbones serving ``'embed'``).
        final (Tensor, optional): ``(B, N, C)`` the last block's tokens after the backbone's final
            norm (the raw last-block tokens when it has none), extra tokens first (backbones
            serving ``'final'``).
        stages (Dict[int, Tensor]): every stage -> ``(B, H_s * W_s, C_s)`` its output after its
            down-sampling (Swin: after the stage's patch merging, before any norm; the last stage,
            which has none, gives its last block's tokens); ``stage_grids`` their grids (backbones
            serving ``'stages'``).
    """

    mix: Optional[MixPlan] = None
    token_layers: Sequence[int] = ()
    attn_layers: Sequence[int] = ()
    grid: Tuple[int, int] = (0, 0)
    num_layers: int = 0
    num_extra_tokens: int = 0
    grids: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    windows: Dict[int, WindowLayout] = field(default_factory=dict)
    tokens: Dict[int, Tensor] = field(default_factory=dict)
    attn: Dict[int, Tensor] = field(default_factory=dict)
    stream: Optional[TokenStream] = None
    labels: Optional[Tensor] = None
    streamed: Dict[int, Tensor] = field(default_factory=dict)
    embed: Optional[Tensor] = None
    final: Optional[Tensor] = None
    stages: Dict[int, Tensor] = field(default_factory=dict)
    stage_grids: Dict[int, Tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def for_request(cls, request: TraceRequest, mix: Optional[MixPlan] = None) -> 'TokenTrace':
        """An empty trace that asks for what ``request`` taps and carries its stream."""
        return cls(mix=mix, token_layers=request.token_layers, attn_layers=request.attn_layers,
                   stream=request.stream)

    def index(self, layer: int) -> int:
        """The key of block ``layer`` in ``tokens`` / ``attn`` / ``grids`` / ``windows`` (negative
        indices count from the backbone's last block)."""
        return layer + self.num_layers if layer < 0 else layer

    def patch_tokens(self, layer: int) -> Tensor:
        """``(B, H * W, C)`` patch tokens recorded after block ``layer`` (extra tokens dropped)."""
        return self.tokens[self.index(layer)][:, self.num_extra_tokens:]

    def final_patch_tokens(self) -> Tensor:
        """``(B, H * W, C)`` patch tokens of :attr:`final` (after the final norm, extra tokens dropped)."""
        return self.final[:, self.num_extra_tokens:]

    def token_map(self, layer: int) -> Tensor:
        """``(B, C, H, W)`` patch tokens of block ``layer`` on the block's grid."""
        x = self.patch_tokens(layer)
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *self.grids[self.index(layer)])

    def stage_map(self, stage: int) -> Tensor:
        """``(B, C, H, W)`` output of stage ``stage`` (negative from the last) after its down-sampling."""
        stage = stage + len(self.stages) if stage < 0 else stage
        x = self.stages[stage]
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *self.stage_grids[stage])

    @staticmethod
    def resolve(layers: Sequence[int], num_layers: int) -> Tuple[int, ...]:
        """Turn block indices (negative ones count from the end) into checked non-negative ones."""
        out = []
        for i in layers:
            j = i + num_layers if i < 0 else i
            if not 0 <= j < num_layers:
                raise IndexError(f'block index {i} is out of range for a backbone with {num_layers} blocks')
            out.append(j)
        return tuple(out)
