"""What a backbone offers a trace (:class:`TraceSpec`), what a user asks of it (:class:`TraceRequest`) and the
one check between them (:func:`check_request`), whose errors name user, backbone and fix."""

from dataclasses import dataclass
from typing import FrozenSet, Iterable, Optional, Sequence, Tuple

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


def resolve_indices(indices: Sequence[int], count: int, kind: str = 'block') -> Tuple[int, ...]:
    """The one resolver of block, stage and output indices: negative ones count from the last of ``count``.

    Raises:
        IndexError: naming the ``kind`` and the first index outside ``-count .. count - 1`` (also its ``index``).
    """
    bad = next((i for i in indices if not -count <= i < count), None)
    if bad is not None:
        error = IndexError(f'{kind} index {bad} is out of range for a backbone with {count} {kind}s')
        error.index = bad
        raise error
    return tuple(i + count if i < 0 else i for i in indices)


#: a request's index fields and the widths it expects of each
_WIDTHS = (('token_layers', 'token_channels'), ('stages', 'stage_channels'), ('outputs', 'out_channels'))


def _freeze(owner, tuples: Tuple[str, ...]) -> None:
    """Store the fields ``tuples`` of a spec or request as tuples and its names as frozensets, refusing unknown
    names. The field names are given, not read from the dataclass: a loss under ``torch.compile`` builds requests,
    and dynamo cannot trace ``dataclasses.fields`` nor compare typing objects (a graph break per request)."""
    for name in tuples:
        object.__setattr__(owner, name, tuple(getattr(owner, name)))
    for name, known in (('services', SERVICES), ('points', POINTS), ('facts', FACTS)):
        value = frozenset(getattr(owner, name))
        if value - set(known):
            raise ValueError(f'unknown trace {name} {sorted(value - set(known))}; known: {sorted(known)}')
        object.__setattr__(owner, name, value)


@dataclass(frozen=True)
class TraceSpec:
    """What a trace-taking backbone offers (``backbone.trace_spec``), checked against every user's request.

    Args:
        num_blocks (int): Blocks, numbered across stages; ``channels`` (Tuple[int, ...]) the width of each output.
        tappable (Tuple[int, ...], optional): The blocks that can be tapped (CvT: its last stage's); None: all.
        num_extra_tokens (int): Tokens before the patch tokens in the traced blocks (1 for a cls token).
        services, points, facts (FrozenSet[str]): The keys of :data:`SERVICES`, :data:`POINTS`, :data:`FACTS` it
            gives, records and meets.
        out_types (Tuple[str, ...]): The ``out_type`` values it can be built with; ``out_type`` (str) the one it is.
        stage_channels (Tuple[int, ...]): The width of every stage's output (point ``'stages'``).
        out_channels (Tuple[int, ...]): The width ``C`` of each ``forward`` output (``(B, C, ...)`` maps,
            ``(B, N, C)`` tokens); empty: not checked.
        patch_stride (int, optional): Input pixels per side of an embedding token (None: not checked).
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
    stage_channels: Tuple[int, ...] = ()
    out_channels: Tuple[int, ...] = ()
    patch_stride: Optional[int] = None

    def __post_init__(self):
        tappable = tuple(range(self.num_blocks)) if self.tappable is None else tuple(self.tappable)
        object.__setattr__(self, 'tappable', tappable)
        _freeze(self, ('channels', 'out_types', 'stage_channels', 'out_channels'))
        if len(self.channels) != self.num_blocks:
            raise ValueError(f'a trace spec gives {len(self.channels)} channel counts for {self.num_blocks} blocks')
        if ('stages' in self.points) != bool(self.stage_channels):
            raise ValueError("a trace spec records the point 'stages' exactly when it gives stage_channels")

    @property
    def num_stages(self) -> int:
        """The stages whose outputs the point ``'stages'`` records (0 without it)."""
        return len(self.stage_channels)

    @property
    def tappable_text(self) -> str:
        """The tappable blocks in words: ``'0..11'``."""
        t = self.tappable
        return f'{t[0]}..{t[-1]}' if t == tuple(range(t[0], t[-1] + 1)) else ', '.join(map(str, t))


@dataclass(frozen=True)
class TraceRequest:
    """What one trace user asks of the backbone.

    Args:
        token_layers, attn_layers (Tuple[int, ...]): Blocks whose output tokens / attention maps (service
            ``'attn'``) it reads; negative indices count from the last block.
        points, facts (FrozenSet[str]): The keys of :data:`POINTS` it reads and of :data:`FACTS` it relies on.
        services (FrozenSet[str]): Services beyond those its taps imply (``{'mix'}``: a plan the backbone mixes).
        stream (TokenStream, optional): Values the backbone carries through every block (service ``'stream'``).
        out_type (str, optional): The backbone output format it reads (``'raw'``: every token).
        trace (bool): Whether it reads a trace when it asks for nothing else (the grid, the extra tokens, the
            plan: a batch mix).
        stages (Tuple[int, ...]): Stages whose outputs it reads (implies the point ``'stages'``).
        outputs (Tuple[int, ...]): The ``forward`` outputs it reads (no trace needed).
        token_channels, stage_channels, out_channels (Tuple[int, ...]): The width it expects of each of
            ``token_layers``, ``stages``, ``outputs`` (empty: not checked).
        patch_size (int, optional): The pixel stride of the plan's grid it takes for the embedding's.

    The widths, ``out_type``, ``outputs`` and ``patch_size`` are checked per user, not merged by :meth:`union`.
    """

    token_layers: Tuple[int, ...] = ()
    attn_layers: Tuple[int, ...] = ()
    points: FrozenSet[str] = frozenset()
    facts: FrozenSet[str] = frozenset()
    services: FrozenSet[str] = frozenset()
    stream: Optional['TokenStream'] = None  # noqa: F821  (token_trace.TokenStream)
    token_channels: Tuple[int, ...] = ()
    out_type: Optional[str] = None
    trace: bool = False
    stages: Tuple[int, ...] = ()
    stage_channels: Tuple[int, ...] = ()
    outputs: Tuple[int, ...] = ()
    out_channels: Tuple[int, ...] = ()
    patch_size: Optional[int] = None

    def __post_init__(self):
        _freeze(
            self,
            ('token_layers', 'attn_layers', 'token_channels', 'stages', 'stage_channels', 'outputs', 'out_channels'),
        )
        if self.stages:
            object.__setattr__(self, 'points', self.points | {'stages'})
        for indices, widths in _WIDTHS:
            if getattr(self, widths) and len(getattr(self, widths)) != len(getattr(self, indices)):
                raise ValueError(
                    f'{widths} {getattr(self, widths)} need one entry per entry of {indices} {getattr(self, indices)}'
                )

    @property
    def all_services(self) -> FrozenSet[str]:
        """:attr:`services` plus what the taps and the stream imply."""
        implied = {'attn'} if self.attn_layers else set()
        return self.services | implied | ({'stream'} if self.stream is not None else set())

    @property
    def needs_trace(self) -> bool:
        """Whether the user reads a trace at all (a request for backbone outputs only does not)."""
        asks = (self.token_layers, self.attn_layers, self.points, self.facts, self.services)
        return self.trace or self.stream is not None or any(asks)

    @staticmethod
    def union(requests: Iterable['TraceRequest']) -> 'TraceRequest':
        """One request serving all ``requests`` (layers and stages in first-seen order)."""
        requests = list(requests)
        merge = lambda attr: tuple(dict.fromkeys(i for r in requests for i in getattr(r, attr)))  # noqa: E731
        streams = list({id(r.stream): r.stream for r in requests if r.stream is not None}.values())
        if len(streams) > 1:
            raise ValueError(
                f'a backbone carries one token stream, but {len(streams)} trace users bring one: '
                + ', '.join(type(s).__name__ for s in streams)
            )
        union = lambda attr: frozenset().union(*(getattr(r, attr) for r in requests))  # noqa: E731
        return TraceRequest(
            **{attr: merge(attr) for attr in ('token_layers', 'attn_layers', 'stages')},
            **{attr: union(attr) for attr in ('points', 'facts', 'services')},
            stream=streams[0] if streams else None,
            trace=any(r.needs_trace for r in requests),
        )


def trace_request_of(user) -> TraceRequest:
    """The :class:`TraceRequest` of a trace user (an empty one for objects that declare none)."""
    return getattr(user, 'trace_request', None) or TraceRequest()


class TraceUserError(ValueError):
    """A trace user the backbone cannot serve (:func:`check_request`), naming the user, the backbone and the fix."""


def check_request(spec: Optional[TraceSpec], request: TraceRequest, user_name: str, backbone_name: str) -> None:
    """Fail, naming the user and the backbone, when a backbone of ``spec`` cannot serve ``request``: the one check
    behind :func:`check_trace_user` (build time) and :meth:`~mmvitreg.models.trace.TokenTrace.start` (every traced
    forward).

    Raises:
        TraceUserError (ValueError): the first need the backbone does not meet.
    """
    user, backbone = user_name, backbone_name
    if spec is None:
        if request.needs_trace:
            raise TraceUserError(
                f'{user} needs a backbone that takes a token trace; {backbone} does not: use an mmvitreg backbone '
                '(mmvitreg.VisionTransformer, DeepViT, LVViT, SwinTransformer, CvT) or a user that reads only the '
                'backbone outputs'
            )
        return
    kinds = (
        ('service', request.all_services, spec.services, SERVICES),
        ('point', request.points, spec.points, POINTS),
        ('fact', request.facts, spec.facts, FACTS),
    )
    missing = [(kind, sorted(wanted - offered), known) for kind, wanted, offered, known in kinds if wanted - offered]
    if missing:
        needs = ' and '.join(
            f'the {kind} {names} (' + '; '.join(known[n] for n in names) + ')' for kind, names, known in missing
        )
        offers = ', '.join(f'{kind}s {sorted(offered)}' for kind, _, offered, _ in kinds)
        raise TraceUserError(f'{user} needs {needs} but {backbone} offers {offers}')
    taps = (
        ('tokens', 'block', request.token_layers, spec.num_blocks),
        ('attention maps', 'block', request.attn_layers, spec.num_blocks),
        ('outputs', 'stage', request.stages, spec.num_stages),
    )
    for what, kind, indices, count in taps:
        try:
            resolved = resolve_indices(indices, count, kind)
        except IndexError as e:
            raise TraceUserError(f'{user} taps the {what} of a {kind} that {backbone} does not have: {e}') from None
        outside = [i for i, j in zip(indices, resolved) if j not in spec.tappable]
        if kind == 'block' and outside:
            raise TraceUserError(
                f'{user} taps the {what} of blocks {outside}, but {backbone} traces only blocks '
                f'{spec.tappable_text} (of 0..{spec.num_blocks - 1}): tap one of those (-1 is the '
                'last block)'
            )
    out_type = request.out_type
    if out_type is not None and out_type != spec.out_type:
        if out_type in spec.out_types:
            raise TraceUserError(
                f"{user} reads the backbone's out_type={out_type!r} output but {backbone} is built "
                f"with out_type={spec.out_type!r}: set the backbone's out_type={out_type!r}"
            )
        raise TraceUserError(
            f"{user} reads the backbone's out_type={out_type!r} output, which {backbone} does not "
            f'produce (it offers {list(spec.out_types)}): use a backbone with out_type={out_type!r} '
            '(mmvitreg.VisionTransformer, DeepViT, LVViT)'
        )
    outputs = len(spec.out_channels)
    if outputs and any(not -outputs <= i < outputs for i in request.outputs):
        raise TraceUserError(
            f'{user} reads the backbone outputs {list(request.outputs)}, but {backbone} gives '
            f'{outputs}: set its out_indices or the outputs the user reads'
        )
    widths = (
        ('the tokens of blocks', request.token_layers, request.token_channels, spec.channels),
        ('the outputs of stages', request.stages, request.stage_channels, spec.stage_channels),
        ('its outputs', request.outputs, request.out_channels, spec.out_channels),
    )
    for where, indices, expected, offered in widths:
        actual = [offered[i] for i in resolve_indices(indices, len(offered))] if expected and offered else []
        if list(expected) != actual and actual:
            raise TraceUserError(
                f'{user} expects {list(expected)} channels in {where} {list(indices)} but '
                f'{backbone} has {actual}: set its in_channels to {actual}'
            )
    stream_blocks = getattr(request.stream, 'num_layers', None)  # None: the stream takes the trace's depth
    if stream_blocks is not None and stream_blocks != spec.num_blocks:
        raise TraceUserError(
            f'{user} carries its stream through num_layers={stream_blocks} blocks but {backbone} has '
            f'{spec.num_blocks}: set num_layers={spec.num_blocks} or leave it out (the depth is taken from the '
            'backbone)'
        )
    stride = spec.patch_stride
    if request.patch_size is not None and stride is not None and request.patch_size != stride:
        raise TraceUserError(
            f"{user} draws its plan on {request.patch_size}-pixel patches but {backbone} embeds "
            f"{stride}-pixel patches: set the plan's patch_size={stride} (the backbone's token "
            'stride)'
        )


def check_trace_user(backbone, request: TraceRequest, user_name: str) -> None:
    """:func:`check_request` for a built backbone (its ``trace_spec``; none: it takes no trace)."""
    check_request(getattr(backbone, 'trace_spec', None), request, user_name, type(backbone).__name__)
