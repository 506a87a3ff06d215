"""The token trace: filled by a backbone through its recording API (:meth:`TokenTrace.start`, ``block``,
``downsample``, ``stage``, ``end``), read by the users."""

from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Optional, Protocol, Sequence, Tuple, Union

from torch import Tensor

from ..layers import Ride, WindowLayout
from .capabilities import TraceRequest, TraceSpec, check_request, resolve_indices
from .mix_plan import MixPlan


class TokenStream(Protocol):
    """A user's per-token values ``(B, N, D)`` (extra tokens first, ``N = num_extra_tokens + H * W``), carried
    through each block's head-averaged attention (TL-Align's labels, Eq. 9) as a
    :class:`~mmvitreg.models.layers.Ride` (its ``mixed`` shaped as them), without the ``(B, heads, N, N)`` maps."""

    def start(self, trace: 'TokenTrace') -> Tensor:
        """The values of the tokens that enter the first block (``trace.grid``, ``trace.mix``,
        ``trace.num_extra_tokens`` and ``trace.samples`` are set)."""

    def step(self, trace: 'TokenTrace', layer: int, values: Tensor, mixed: Tensor, stochastic: bool = False) -> Tensor:
        """The values after block ``layer``, from those before it and what its attention ``mixed``;
        ``stochastic``: every row of that map sums to 1 over the tokens that carry values (softmax, no padding)."""

    def resize(self, values: Tensor, grid: Tuple[int, int], new_grid: Tuple[int, int]) -> Tensor:
        """The values after a downsampling between blocks (Swin's patch merging) from ``grid`` to ``new_grid``."""


#: ``run(x, need_attn, ride)`` of one block: its output tokens, or ``(tokens, attention map)`` with ``need_attn``
BlockRun = Callable[[Tensor, bool, Optional[Ride]], Union[Tensor, Tuple[Tensor, Tensor]]]


@dataclass
class TokenTrace:
    """Travels with one batch through a backbone's forward.

    In (what users asked for, usually set by :meth:`for_request`):
        mix (MixPlan, optional): the plan that mixes the patch tokens after the embedding (unless it mixed pixels).
        token_layers, attn_layers (Sequence[int]): blocks whose output tokens / attention maps to record
            (negative from the last block); only ``attn_layers`` leave the fused attention kernel.
        points (FrozenSet[str]): recording points to fill (keys of :data:`POINTS`).
        stream (TokenStream, optional): values to carry through every block.
        samples (list, optional): the batch's data samples (training), for a stream of labels.

    Out (filled by the recording API):
        grid (Tuple[int, int]): the patch-token grid of the embedding ``(Hg, Wg)``, the grid a plan mixes.
        num_layers, num_stages (int): the backbone's blocks and (point ``'stages'``) stages.
        num_extra_tokens (int): tokens before the patch tokens in the traced blocks (1 for a cls token).
        grids (Dict[int, Tuple[int, int]]): every block -> the grid of its output tokens.
        tokens (Dict[int, Tensor]): tapped block -> ``(B, N, C)`` its output tokens (before any final
            norm), extra tokens first, ``N = num_extra_tokens + H * W`` on ``grids[i]``.
        attn (Dict[int, Tensor]): tapped block -> the attention map that multiplies ``V``, before attention
            dropout: ``(B, heads, N, N)`` in a ViT (re-attention: after the head transform and its norm, which
            follow the dropout), ``(B * nW, heads, w * w, w * w)`` per window in a Swin, placed on the grid by
            ``windows[i]`` (a :class:`~mmvitreg.models.layers.WindowLayout`).
        streamed (Dict[int, Tensor]): every block -> the stream's values after it ``(B, N, D)``.
        embed (Tensor, optional): point ``'embed'``: ``(B, H * W, C)`` the patch tokens after any token mix.
        final (Tensor, optional): point ``'final'``: ``(B, N, C)`` the last block's tokens after the final norm
            (if any).
        stages (Dict[int, Tensor]): point ``'stages'``: every stage -> ``(B, H_s * W_s, C_s)`` its output after its
            patch merging, before any norm (the last stage: its last block's tokens); ``stage_grids`` their grids.
    """

    mix: Optional[MixPlan] = None
    token_layers: Sequence[int] = ()
    attn_layers: Sequence[int] = ()
    points: FrozenSet[str] = frozenset()
    stream: Optional[TokenStream] = None
    samples: Optional[list] = None
    grid: Tuple[int, int] = (0, 0)
    num_layers: int = 0
    num_stages: int = 0
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
    def for_request(
        cls, request: TraceRequest, mix: Optional[MixPlan] = None, samples: Optional[list] = None
    ) -> 'TokenTrace':
        """An empty trace that asks for what ``request`` taps and carries its stream (the In fields, in order)."""
        return cls(mix, request.token_layers, request.attn_layers, request.points, request.stream, samples)

    # ------------------------------------------------------------------ the recording API (backbones)
    def start(
        self, spec: TraceSpec, tokens: Tensor, grid: Tuple[int, int], backbone_name: str = 'the backbone'
    ) -> Tensor:
        """After the patch embedding, on ``tokens`` ``(B, H * W, C)`` on ``grid`` (before any extra token and the
        position embedding): check the trace against ``spec`` (:func:`~mmvitreg.models.trace.check_request`) and
        the plan's grid (:meth:`MixPlan.check_grid`), mix the tokens (unless the plan mixed the pixels), record
        ``'embed'`` and start the stream; returns the (mixed) tokens."""
        mixes = self.mix is not None and not self.mix.in_pixels
        services = {'mix'} if mixes else ()
        request = TraceRequest(self.token_layers, self.attn_layers, self.points, services=services, stream=self.stream)
        check_request(spec, request, 'this trace', backbone_name)
        if self.mix is not None and (mixes or self.stream is not None):  # mixed here, or a stream starts from it
            self.mix.check_grid(grid, f'{backbone_name} has')
        self.grid, self.num_extra_tokens = tuple(grid), spec.num_extra_tokens
        self.num_layers, self.num_stages = spec.num_blocks, spec.num_stages
        self._token_taps = frozenset(resolve_indices(self.token_layers, spec.num_blocks))
        self._attn_taps = frozenset(resolve_indices(self.attn_layers, spec.num_blocks))
        if mixes:
            tokens = self.mix.mix_tokens(tokens)
        if 'embed' in self.points:
            self.embed = tokens
        if self.stream is not None:
            self._values = self.stream.start(self)
        return tokens

    def block(
        self, index: int, run: BlockRun, x: Tensor, grid: Tuple[int, int], layout: Optional[WindowLayout] = None
    ) -> Tensor:
        """Run block ``index`` as ``run(x, need_attn, ride)`` (``need_attn``: its map is tapped; ``ride``: the
        stream's values, in the block's windows with a ``layout``) and record its grid, tapped tokens, map and
        ``layout``, and the stream's next values; returns its output tokens."""
        need_attn = index in self._attn_taps
        ride = None
        if self.stream is not None:
            ride = Ride(self._values if layout is None else layout.partition(self._values))
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
            mixed = ride.mixed if layout is None else layout.reverse(ride.mixed)
            # padding tokens carry no values: a row that attends them does not keep its mass
            stochastic = ride.stochastic and (layout is None or layout.padded == layout.grid)
            self._values = self.streamed[index] = self.stream.step(self, index, self._values, mixed, stochastic)
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
        """The key of block ``layer`` (negative from the last) in ``tokens`` / ``attn`` / ``grids`` / ``windows``."""
        return resolve_indices((layer,), self.num_layers)[0]

    @property
    def last_grid(self) -> Tuple[int, int]:
        """The token grid of the last block (of :attr:`final` and a ``'raw'`` output)."""
        return self.grids[self.num_layers - 1]

    def patch_tokens(self, layer: int) -> Tensor:
        """``(B, H * W, C)`` patch tokens recorded after block ``layer`` (extra tokens dropped)."""
        return self.tokens[self.index(layer)][:, self.num_extra_tokens :]

    def final_patch_tokens(self) -> Tensor:
        """``(B, H * W, C)`` patch tokens of :attr:`final` (after the final norm, extra tokens dropped)."""
        return self.final[:, self.num_extra_tokens :]

    def token_map(self, layer: int) -> Tensor:
        """``(B, C, H, W)`` patch tokens of block ``layer`` on the block's grid."""
        x = self.patch_tokens(layer)
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *self.grids[self.index(layer)])

    def stage_map(self, stage: int) -> Tensor:
        """``(B, C, H, W)`` output of stage ``stage`` (negative from the last) after its down-sampling."""
        stage = resolve_indices((stage,), self.num_stages, 'stage')[0]
        x = self.stages[stage]
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *self.stage_grids[stage])
