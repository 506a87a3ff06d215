"""The token trace: what travels with the tokens through an mmvitreg backbone.

All techniques of this package need something to ride along with the tokens:

* MixToken / TL-Align mix the token maps of two images right after patch embedding, before the
  position embedding (the *mixing plan* goes in);
* token labeling, DiversePatch, DRLoc and the diagnostics read the tokens of chosen blocks and,
  for some, their attention maps (the *taps* come out);
* TL-Align carries per-token labels through every block's attention (a *stream*).

**Backbones.** A backbone that takes a trace declares what it offers in a :class:`TraceSpec`
(``backbone.trace_spec``): its blocks and which of them can be tapped, their token widths, the
services it gives (``'mix'``, ``'attn'``, ``'stream'``), the recording points it has besides the
blocks (``'embed'``, ``'final'``, ``'stages'``), facts about its tokens (``'cls_token'``,
``'isotropic'``) and the output formats (``out_type``) it can produce. Its ``forward(x, trace=None)``
fills the trace only through the recording API of :class:`TokenTrace`, at fixed points:

* :meth:`TokenTrace.start` after the patch embedding (mixes the tokens, records ``'embed'``,
  starts the stream);
* :meth:`TokenTrace.block` for every block (runs it with a :class:`~mmvitreg.models.layers.Ride`
  and an attention map when asked, records its tokens, map and grid, steps the stream);
* :meth:`TokenTrace.downsample` / :meth:`TokenTrace.stage` at a hierarchical backbone's patch
  merging and stage ends;
* :meth:`TokenTrace.end` with the final (normed) tokens.

So the recording code exists once, here. Without a trace the backbone is an ordinary backbone
(same outputs, fused attention, no extra work).

**Trace users.** Whatever reads a trace (a head, an auxiliary loss, a target transform, a token mix)
declares a :class:`TraceRequest`: the blocks whose tokens / attention maps it taps, the points and
facts it relies on, the backbone output format it reads, its stream. :func:`check_trace_user`
compares a request with a backbone's spec when the model is built and fails at once, naming user,
backbone and the fix (a tap outside the tappable blocks, a missing service, point or fact, an output
format the backbone lacks or is not set to, a tap of another width, a stream for another depth). A
user whose request is empty reads only the backbone's outputs and works with any backbone, including
those with no trace (mmpretrain's ResNet, T2T-ViT, ConvNeXt).

**Streams: values that ride along with the tokens.** A user that propagates per-token values with
each block's head-averaged attention (TL-Align's labels, paper Eq. 9) need not read the
``(B, heads, N, N)`` maps: it gives its request a :class:`TokenStream`, and :meth:`TokenTrace.block`
hands each block's attention the stream's values as a :class:`~mmvitreg.models.layers.Ride` (in the
block's windows, when it attends in windows). The stream updates its values between blocks
(``stream.step``) and at patch merging (``stream.resize``); ``trace.streamed[i]`` holds them after
block ``i``.
"""
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, Optional, Protocol, Sequence, Tuple, Union

from torch import Tensor

from .layers import Ride, WindowLayout

#: What a trace-taking backbone may do for a user besides recording block tokens (which all do).
SERVICES = {
    'mix': 'mixes the patch tokens with a MixPlan right after the patch embedding',
    'attn': 'records the attention maps of tapped blocks',
    'stream': 'carries the values of a TokenStream through the attention of every block (a Ride per block)',
}
#: Recording points besides the blocks; a user asks for one in ``TraceRequest.points``.
POINTS = {
    'embed': 'records the patch-embedding output (after any token mix, before the position embedding)',
    'final': "records the last block's tokens after the backbone's final norm",
    'stages': "records every stage's output tokens after its down-sampling (hierarchical backbones)",
}
#: Facts about a backbone's tokens a user may rely on.
FACTS = {
    'cls_token': 'has a class token in front of the patch tokens of its traced blocks',
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
        """The values of the tokens that enter the first block (``trace.grid``, ``trace.mix``,
        ``trace.num_extra_tokens`` and ``trace.samples`` are set)."""

    def step(self, trace: 'TokenTrace', layer: int, values: Tensor, mixed: Tensor) -> Tensor:
        """The values after block ``layer``, from those before it and what its attention ``mixed``."""

    def resize(self, values: Tensor, grid: Tuple[int, int], new_grid: Tuple[int, int]) -> Tensor:
        """The values after a downsampling between blocks (Swin's patch merging) from ``grid`` to ``new_grid``."""


def resolve_blocks(layers: Sequence[int], num_blocks: int) -> Tuple[int, ...]:
    """Block indices (negative ones count from the last block) as checked non-negative ones.

    Raises:
        IndexError: an index outside ``-num_blocks .. num_blocks - 1``.
    """
    out = []
    for i in layers:
        j = i + num_blocks if i < 0 else i
        if not 0 <= j < num_blocks:
            raise IndexError(f'block index {i} is out of range for a backbone with {num_blocks} blocks')
        out.append(j)
    return tuple(out)


@dataclass(frozen=True)
class TraceSpec:
    """What a trace-taking backbone offers (``backbone.trace_spec``), checked against every user's request.

    Args:
        num_blocks (int): Blocks, numbered across stages (negative tap indices count from the last).
        channels (Tuple[int, ...]): The token width of every block's output.
        tappable (Tuple[int, ...]): The blocks whose tokens and attention maps can be tapped (a backbone
            whose earlier stages have another token layout traces only its last stage: CvT). Defaults to
            every block.
        num_extra_tokens (int): Tokens before the patch tokens in the traced blocks (1 for a cls token).
        services (FrozenSet[str]): Keys of :data:`SERVICES` it gives.
        points (FrozenSet[str]): Keys of :data:`POINTS` it records.
        facts (FrozenSet[str]): Keys of :data:`FACTS` that hold for it.
        out_types (Tuple[str, ...]): The output formats (``out_type``) it can be built with.
        out_type (str): The format it is built with.
    """

    num_blocks: int
    channels: Tuple[int, ...]
    tappable: Optional[Tuple[int, ...]] = None
    num_extra_tokens: int = 0
    services: FrozenSet[str] = frozenset()
    points: FrozenSet[str] = frozenset()
    facts: FrozenSet[str] = frozenset()
    out_types: Tuple[str, ...] = ()
    out_type: str = ''

    def __post_init__(self):
        tappable = tuple(range(self.num_blocks)) if self.tappable is None else tuple(self.tappable)
        object.__setattr__(self, 'tappable', tappable)
        for name, known in (('services', SERVICES), ('points', POINTS), ('facts', FACTS)):
            value = frozenset(getattr(self, name))
            object.__setattr__(self, name, value)
            if value - set(known):
                raise ValueError(f'unknown trace {name} {sorted(value - set(known))}; known: {sorted(known)}')
        if len(self.channels) != self.num_blocks:
            raise ValueError(f'a trace spec gives {len(self.channels)} channel counts for {self.num_blocks} blocks')

    @property
    def tappable_text(self) -> str:
        """The tappable blocks in words: ``'0..11'``."""
        t = self.tappable
        return f'{t[0]}..{t[-1]}' if t == tuple(range(t[0], t[-1] + 1)) else ', '.join(map(str, t))


@dataclass(frozen=True)
class TraceRequest:
    """What one trace user asks of the backbone.

    Args:
        token_layers (Tuple[int, ...]): Blocks whose output tokens it reads (negative indices count
            from the last block).
        attn_layers (Tuple[int, ...]): Blocks whose attention maps it reads (service ``'attn'``).
        points (FrozenSet[str]): Recording points it reads (keys of :data:`POINTS`).
        facts (FrozenSet[str]): Facts it relies on (keys of :data:`FACTS`).
        services (FrozenSet[str]): Services it needs beyond those its taps imply (``{'mix'}`` for a
            plan mixed by the backbone).
        stream (TokenStream, optional): Values the backbone carries through every block for the user
            (service ``'stream'``; at most one stream per model).
        token_channels (Tuple[int, ...]): The channels the user expects of each ``token_layers`` tap
            (one per tap; empty: not checked). Only checked, not merged by :meth:`union`.
        out_type (str, optional): The backbone output format the user reads (``'raw'`` for every token).
        trace (bool): Whether the user reads a trace even when it asks for nothing above (it reads the
            grid, the number of extra tokens or the plan: a token mix). Implied by everything else.
    """

    token_layers: Tuple[int, ...] = ()
    attn_layers: Tuple[int, ...] = ()
    points: FrozenSet[str] = frozenset()
    facts: FrozenSet[str] = frozenset()
    services: FrozenSet[str] = frozenset()
    stream: Optional[TokenStream] = None
    token_channels: Tuple[int, ...] = ()
    out_type: Optional[str] = None
    trace: bool = False

    def __post_init__(self):
        for name in ('token_layers', 'attn_layers', 'token_channels'):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name, known in (('points', POINTS), ('facts', FACTS), ('services', SERVICES)):
            value = frozenset(getattr(self, name))
            object.__setattr__(self, name, value)
            if value - set(known):
                raise ValueError(f'unknown trace {name} {sorted(value - set(known))}; known: {sorted(known)}')
        if self.token_channels and len(self.token_channels) != len(self.token_layers):
            raise ValueError(f'token_channels {self.token_channels} need one entry per token layer {self.token_layers}')

    @property
    def all_services(self) -> FrozenSet[str]:
        """:attr:`services` plus what the taps and the stream imply."""
        return self.services | ({'attn'} if self.attn_layers else set()) | (
            {'stream'} if self.stream is not None else set())

    @property
    def needs_trace(self) -> bool:
        """Whether the user reads a trace at all (an empty request reads only the backbone outputs)."""
        return bool(self.trace or self.token_layers or self.attn_layers or self.points or self.facts
                    or self.services or self.stream is not None)

    @staticmethod
    def union(requests: Iterable['TraceRequest']) -> 'TraceRequest':
        """One request serving all ``requests`` (layers in first-seen order; ``out_type`` is checked per
        user, not merged)."""
        requests = list(requests)
        merge = lambda attr: tuple(dict.fromkeys(i for r in requests for i in getattr(r, attr)))  # noqa: E731
        streams = list(dict.fromkeys(id(r.stream) for r in requests if r.stream is not None))
        if len(streams) > 1:
            raise ValueError(f'a backbone carries one token stream, but {len(streams)} trace users bring one: '
                             + ', '.join(type(r.stream).__name__ for r in requests if r.stream is not None))
        union = lambda attr: frozenset().union(*(getattr(r, attr) for r in requests))  # noqa: E731
        return TraceRequest(merge('token_layers'), merge('attn_layers'), union('points'), union('facts'),
                            union('services'), next((r.stream for r in requests if r.stream is not None), None),
                            trace=any(r.needs_trace for r in requests))


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
    """The backbone takes no trace or lacks a service, point or fact the user needs."""


class TraceTapError(TraceUserError, IndexError):
    """The user taps a block the backbone does not have or cannot tap."""


class TraceStreamError(TraceUserError, ValueError):
    """The user's stream is meant for another number of blocks."""


class TraceChannelError(TraceUserError, ValueError):
    """A tapped block's tokens have another width than the user expects."""


class TraceFormatError(TraceUserError, ValueError):
    """The user reads a backbone output format (``out_type``) the backbone lacks or is not built with;
    ``settable`` says whether setting the backbone's ``out_type`` fixes it."""

    def __init__(self, message: str, reason: str, settable: bool):
        super().__init__(message, reason)
        self.settable = settable


def check_request(spec: Optional[TraceSpec], request: TraceRequest, user_name: str, backbone_name: str) -> None:
    """Fail, naming the user and the backbone, when a backbone of ``spec`` cannot serve ``request``.

    The one check behind :func:`check_trace_user` (build time) and :meth:`TokenTrace.start` (a trace made
    by hand). Every error is a :class:`TraceUserError` with ``reason``, a few words for a table cell.

    Raises:
        TraceCapabilityError (TypeError): no trace (``spec`` None), or a missing service, point or fact.
        TraceTapError (IndexError): a tap of a block the backbone does not have or cannot tap.
        TraceFormatError (ValueError): the user's ``out_type`` is not the backbone's.
        TraceChannelError (ValueError): a tapped block's tokens are not as wide as ``token_channels``.
        TraceStreamError (ValueError): the stream is meant for another number of blocks (its ``num_layers``).
    """
    if not request.needs_trace:
        return
    if spec is None:
        raise TraceCapabilityError(f'{user_name} needs a backbone that takes a token trace; {backbone_name} does '
                                   'not: use an mmvitreg backbone (mmvitreg.VisionTransformer, DeepViT, LVViT, '
                                   'SwinTransformer, CvT) or a user that reads only the backbone outputs', 'no trace')
    kinds = (('service', request.all_services, spec.services, SERVICES),
             ('point', request.points, spec.points, POINTS), ('fact', request.facts, spec.facts, FACTS))
    missing = [(kind, sorted(wanted - offered), known) for kind, wanted, offered, known in kinds if wanted - offered]
    if missing:
        needs = ' and '.join(f'the {kind} {names} (' + '; '.join(known[n] for n in names) + ')'
                             for kind, names, known in missing)
        offers = ', '.join(f'{kind}s {sorted(offered)}' for kind, _, offered, _ in kinds)
        raise TraceCapabilityError(f'{user_name} needs {needs} but {backbone_name} offers {offers}',
                                   'no ' + ', '.join(n for _, names, _ in missing for n in names))
    for kind, layers in (('tokens', request.token_layers), ('attention maps', request.attn_layers)):
        try:
            blocks = resolve_blocks(layers, spec.num_blocks)
        except IndexError as e:
            raise TraceTapError(f'{user_name} taps the {kind} of a block that {backbone_name} does not have: {e}',
                                f'only {spec.num_blocks} blocks') from None
        outside = [i for i, j in zip(layers, blocks) if j not in spec.tappable]
        if outside:
            raise TraceTapError(f'{user_name} taps the {kind} of blocks {outside}, but {backbone_name} traces only '
                                f'blocks {spec.tappable_text} (of 0..{spec.num_blocks - 1}): tap one of those '
                                '(-1 is the last block)', f'taps {spec.tappable_text} only')
    if request.out_type is not None and request.out_type != spec.out_type:
        if request.out_type in spec.out_types:
            raise TraceFormatError(f"{user_name} reads the backbone's out_type={request.out_type!r} output but "
                                   f"{backbone_name} is built with out_type={spec.out_type!r}: set the backbone's "
                                   f'out_type={request.out_type!r}', f'needs out_type={request.out_type!r}', True)
        raise TraceFormatError(f"{user_name} reads the backbone's out_type={request.out_type!r} output, which "
                               f'{backbone_name} does not produce (it offers {list(spec.out_types)}): use a '
                               f'backbone with out_type={request.out_type!r} (mmvitreg.VisionTransformer, DeepViT, '
                               'LVViT)', f'no {request.out_type} output', False)
    if request.token_channels:
        actual = [spec.channels[i] for i in resolve_blocks(request.token_layers, spec.num_blocks)]
        if list(request.token_channels) != actual:
            raise TraceChannelError(f'{user_name} expects {list(request.token_channels)} channels in the tokens of '
                                    f'blocks {list(request.token_layers)} but {backbone_name} has {actual}: set its '
                                    f'in_channels to {actual}', f'{", ".join(map(str, actual))} channels')
    stream_blocks = getattr(request.stream, 'num_layers', None)  # None: the stream takes the trace's depth
    if stream_blocks is not None and stream_blocks != spec.num_blocks:
        raise TraceStreamError(f'{user_name} carries its stream through num_layers={stream_blocks} blocks but '
                               f'{backbone_name} has {spec.num_blocks}: set num_layers={spec.num_blocks} or leave it '
                               'out (the depth is taken from the backbone)',
                               f'{spec.num_blocks} blocks, not {stream_blocks}')


def check_trace_user(backbone, request: TraceRequest, user_name: str) -> None:
    """:func:`check_request` for a built backbone (its ``trace_spec``; none: it takes no trace)."""
    check_request(getattr(backbone, 'trace_spec', None), request, user_name, type(backbone).__name__)


#: ``run(x, need_attn, ride)`` of one block: its output tokens, or ``(tokens, attention map)`` with ``need_attn``
BlockRun = Callable[[Tensor, bool, Optional[Ride]], Union[Tensor, Tuple[Tensor, Tensor]]]


@dataclass
class TokenTrace:
    """Travels with one batch through a backbone's forward; the backbone fills it through the recording
    API (:meth:`start`, :meth:`block`, :meth:`downsample`, :meth:`stage`, :meth:`end`).

    In (what users asked for, usually set by :meth:`for_request`):
        mix (MixPlan, optional): mixing plan applied to the patch tokens after the patch embedding and
            before the position embedding (unless it mixed the images in pixel space).
        token_layers (Sequence[int]): blocks whose output tokens to record (negative indices count
            from the last block; a hierarchical backbone numbers its blocks across stages).
        attn_layers (Sequence[int]): blocks whose attention maps to record; only these blocks leave
            the fused attention kernel.
        points (FrozenSet[str]): recording points to fill (keys of :data:`POINTS`).
        stream (TokenStream, optional): values to carry through every block.
        samples (list, optional): the batch's data samples (training), for users that start from the
            ground truth (a stream of labels).

    Out (each field one meaning, filled by the recording API):
        grid (Tuple[int, int]): the patch-token grid of the embedding ``(Hg, Wg)``, the grid a plan mixes.
        num_layers (int): the backbone's number of blocks (for negative indices, see :meth:`index`).
        num_extra_tokens (int): tokens before the patch tokens in the traced blocks (1 for a cls token).
        grids (Dict[int, Tuple[int, int]]): every block -> the grid of its output tokens.
        tokens (Dict[int, Tensor]): tapped block -> ``(B, N, C)`` its output tokens (before any final
            norm), extra tokens first, ``N = num_extra_tokens + H * W`` on ``grids[i]``.
        attn (Dict[int, Tensor]): tapped block -> its attention map, the one that multiplies ``V``:
            ``(B, heads, N, N)`` in a ViT (after softmax, before attention dropout; for re-attention
            after the head transform and its norm, which follow the dropout); ``(B * nW, heads, w * w,
            w * w)`` per window in a Swin (before attention dropout).
        windows (Dict[int, WindowLayout]): tapped windowed block -> the layout that places ``attn[i]``
            (and window tokens) on the grid.
        streamed (Dict[int, Tensor]): every block -> the stream's values after it ``(B, N, D)``.
        embed (Tensor, optional): point ``'embed'``: ``(B, H * W, C)`` the patch tokens after the
            embedding and any token mix, before the position embedding.
        final (Tensor, optional): point ``'final'``: ``(B, N, C)`` the last block's tokens after the
            backbone's final norm (the raw last-block tokens when it has none), extra tokens first.
        stages (Dict[int, Tensor]): point ``'stages'``: every stage -> ``(B, H_s * W_s, C_s)`` its
            output after its down-sampling (Swin: after the stage's patch merging, before any norm; the
            last stage, which has none, gives its last block's tokens); ``stage_grids`` their grids.
    """

    mix: Optional[MixPlan] = None
    token_layers: Sequence[int] = ()
    attn_layers: Sequence[int] = ()
    points: FrozenSet[str] = frozenset()
    stream: Optional[TokenStream] = None
    samples: Optional[list] = None
    grid: Tuple[int, int] = (0, 0)
    num_layers: int = 0
    num_extra_tokens: int = 0
    grids: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    tokens: Dict[int, Tensor] = field(default_factory=dict)
    attn: Dict[int, Tensor] = field(default_factory=dict)
    windows: Dict[int, WindowLayout] = field(default_factory=dict)
    streamed: Dict[int, Tensor] = field(default_factory=dict)
    embed: Optional[Tensor] = None
    final: Optional[Tensor] = None
    stages: Dict[int, Tensor] = field(default_factory=dict)
    stage_grids: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    # set by start(): the resolved taps and the stream's current values
    _token_taps: FrozenSet[int] = field(default=frozenset(), repr=False)
    _attn_taps: FrozenSet[int] = field(default=frozenset(), repr=False)
    _values: Optional[Tensor] = field(default=None, repr=False)

    def __post_init__(self):
        self.points = frozenset(self.points)

    @classmethod
    def for_request(cls, request: TraceRequest, mix: Optional[MixPlan] = None,
                    samples: Optional[list] = None) -> 'TokenTrace':
        """An empty trace that asks for what ``request`` taps and carries its stream."""
        return cls(mix=mix, token_layers=request.token_layers, attn_layers=request.attn_layers,
                   points=request.points, stream=request.stream, samples=samples)

    # ------------------------------------------------------------------ the recording API (backbones)
    def start(self, spec: TraceSpec, tokens: Tensor, grid: Tuple[int, int], backbone_name: str = 'the backbone'
              ) -> Tensor:
        """After the patch embedding: ``tokens`` ``(B, H * W, C)`` on ``grid``, before any extra token and
        the position embedding. Checks the trace against ``spec``, mixes the tokens with :attr:`mix`
        (service ``'mix'``; not when the plan mixed the images in pixel space), records ``'embed'`` and
        starts the stream; returns the (mixed) tokens."""
        mixes = self.mix is not None and not self.mix.in_pixels
        try:  # the fast, compile-friendly path; the one check below explains what is wrong
            token_taps = resolve_blocks(self.token_layers, spec.num_blocks)
            attn_taps = resolve_blocks(self.attn_layers, spec.num_blocks)
            fits = (set(token_taps + attn_taps) <= set(spec.tappable) and self.points <= spec.points
                    and (not mixes or 'mix' in spec.services) and (not attn_taps or 'attn' in spec.services)
                    and (self.stream is None or 'stream' in spec.services))
        except IndexError:
            fits = False
        if not fits:
            check_request(spec, TraceRequest(self.token_layers, self.attn_layers, self.points,
                                             services={'mix'} if mixes else (), stream=self.stream),
                          'this trace', backbone_name)
        self.grid, self.num_layers, self.num_extra_tokens = tuple(grid), spec.num_blocks, spec.num_extra_tokens
        self._token_taps, self._attn_taps = frozenset(token_taps), frozenset(attn_taps)
        if mixes:
            tokens = self.mix.mix_tokens(tokens, self.grid)
        if 'embed' in self.points:
            self.embed = tokens
        if self.stream is not None:
            self._values = self.stream.start(self)
        return tokens

    def block(self, index: int, run: BlockRun, x: Tensor, grid: Tuple[int, int],
              layout: Optional[WindowLayout] = None) -> Tensor:
        """Run block ``index`` as ``run(x, need_attn, ride)`` and record it; returns its output tokens.

        ``need_attn`` is True for a tapped attention map; ``ride`` carries the stream's values (in the
        block's windows with a ``layout``, padding 0). Records ``grids[index] = grid``, the tokens and the
        map of tapped blocks (and the ``layout`` of a tapped map) and the stream's next values."""
        need_attn = index in self._attn_taps
        ride = None
        if self.stream is not None:
            ride = Ride(layout.partition(self._values) if layout is not None else self._values)
        out = run(x, need_attn, ride)
        x, attn = out if need_attn else (out, None)
        self.grids[index] = tuple(grid)
        if index in self._token_taps:
            self.tokens[index] = x
        if need_attn:
            self.attn[index] = attn
            if layout is not None:
                self.windows[index] = layout
        if ride is not None:
            mixed = layout.reverse(ride.mixed) if layout is not None else ride.mixed
            self._values = self.streamed[index] = self.stream.step(self, index, self._values, mixed)
        return x

    def downsample(self, grid: Tuple[int, int], new_grid: Tuple[int, int]) -> None:
        """The tokens were merged from ``grid`` to ``new_grid`` (Swin's patch merging): resize the stream."""
        if self.stream is not None:
            self._values = self.stream.resize(self._values, tuple(grid), tuple(new_grid))

    def stage(self, index: int, x: Tensor, grid: Tuple[int, int]) -> None:
        """Stage ``index`` ends with tokens ``x`` ``(B, H_s * W_s, C_s)`` on ``grid`` (point ``'stages'``)."""
        if 'stages' in self.points:
            self.stages[index], self.stage_grids[index] = x, tuple(grid)

    def end(self, x: Tensor) -> None:
        """The last block's tokens after the final norm, ``(B, N, C)`` (point ``'final'``)."""
        if 'final' in self.points:
            self.final = x

    # ------------------------------------------------------------------ reading (users)
    def index(self, layer: int) -> int:
        """The key of block ``layer`` in ``tokens`` / ``attn`` / ``grids`` / ``windows`` (negative
        indices count from the backbone's last block)."""
        return layer + self.num_layers if layer < 0 else layer

    @property
    def last_grid(self) -> Tuple[int, int]:
        """The token grid of the last block (of :attr:`final` and a ``'raw'`` output)."""
        return self.grids[self.num_layers - 1]

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
