"""How a windowed attention (Swin) places a token grid into its windows: padding, cyclic shift, partition."""
import functools
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


@functools.lru_cache(maxsize=64)
def _shift_mask(padded: Tuple[int, int], window: int, shift: int, device: torch.device) -> Tensor:
    """``(nW, w*w, w*w)`` additive mask (0 / -100) that keeps a shifted window's regions apart."""
    # region of each row / column: 0 before the last window, 1 in it before the shift, 2 after; no
    # indexed assignment, so that the ONNX exporter's tracing can fold it into a constant
    rows, cols = ((torch.arange(n, device=device) >= n - window).float() +
                  (torch.arange(n, device=device) >= n - shift).float() for n in padded)
    region = (rows[:, None] * 3 + cols[None, :]).view(1, *padded, 1)
    ids = WindowLayout.cut(region, window).flatten(1)  # (nW, w*w)
    mask = ids.unsqueeze(1) - ids.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.).masked_fill(mask == 0, 0.)


@functools.lru_cache(maxsize=64)
def _slot_sources(layout: 'WindowLayout', device: torch.device) -> Tensor:
    """``(nW, w * w)`` long: the grid token of every window slot, ``H * W`` (an appended token) on padding."""
    H, W = layout.grid
    return layout.grid_index(device).remainder(H * W + 1)  # -1 (padding) -> H * W


@functools.lru_cache(maxsize=64)
def _token_slots(layout: 'WindowLayout', device: torch.device) -> Tuple[Tensor, Tensor]:
    """``(H * W,)`` long twice: the window and the slot in it of every grid token, the inverse of
    :func:`_slot_sources` (so of :meth:`WindowLayout.partition`): its ``H * W`` real sources are distinct and
    sort below the padding's ``H * W``."""
    H, W = layout.grid
    positions = _slot_sources(layout, device).flatten().argsort()[:H * W]  # the flat slot holding each token
    n = layout.window**2
    return positions // n, positions % n


@dataclass(frozen=True)
class WindowLayout:
    """How a windowed block (Swin) places its ``(H, W)`` token grid into attention windows.

    `Swin Transformer <https://arxiv.org/abs/2103.14030>`_: the grid is zero-padded bottom/right to
    ``padded`` (multiples of ``window``), rolled by ``-shift`` on both axes (cyclic shift), and cut
    into ``num_windows`` windows of ``window * window`` tokens, row-major within a window and across
    windows. Attention runs inside each window; after a shift, :attr:`attn_mask` keeps tokens that
    were not neighbours apart. Every user that needs to put window tokens, window attention maps
    or per-token labels back on the grid goes through this one description.

    Args:
        grid (Tuple[int, int]): The block's token grid ``(H, W)``.
        window (int): Window side ``w``.
        shift (int): Cyclic shift (0 for a regular window block).

    Shapes:
        tokens on the grid ``(B, H * W, ...)``; in windows ``(B * nW, w * w, ...)``, batch-major
        (``b * nW + window``); a window attention map ``(B * nW, heads, w * w, w * w)``.
    """

    grid: Tuple[int, int]
    window: int
    shift: int = 0

    @property
    def padded(self) -> Tuple[int, int]:
        """The padded grid ``(Hp, Wp)``."""
        w = self.window
        # ceil as (g + w - 1) // w, not -(-g // w): the ONNX exporter turns // on a traced negative size
        # into a truncating division
        return (self.grid[0] + w - 1) // w * w, (self.grid[1] + w - 1) // w * w

    @property
    def num_windows(self) -> int:
        """Windows per image ``nW``."""
        return self.padded[0] * self.padded[1] // self.window**2

    @staticmethod
    def cut(x: Tensor, window: int) -> Tensor:
        """``(B, Hp, Wp, *rest)`` -> ``(B * nW, w, w, *rest)``."""
        B, Hp, Wp, *rest = x.shape
        x = x.view(B, Hp // window, window, Wp // window, window, *rest).transpose(2, 3)
        return x.reshape(-1, window, window, *rest)

    def partition(self, x: Tensor, pad_value: float = 0.) -> Tensor:
        """Grid tokens ``(B, H * W, *rest)`` -> window tokens ``(B * nW, w * w, *rest)``.

        Pads with ``pad_value`` (the tokens' own padding is 0, after the block's first norm)."""
        B, L, *rest = x.shape
        (H, W), (Hp, Wp) = self.grid, self.padded
        if L != H * W:
            raise ValueError(f'{L} tokens do not fill the {self.grid} grid of this window layout')
        x = x.view(B, H, W, *rest)
        if (Hp, Wp) != (H, W):
            x = F.pad(x, (0, 0) * len(rest) + (0, Wp - W, 0, Hp - H), value=pad_value)
        if self.shift:
            x = torch.roll(x, (-self.shift, -self.shift), (1, 2))
        return self.cut(x, self.window).flatten(1, 2)

    def reverse(self, windows: Tensor) -> Tensor:
        """Window tokens ``(B * nW, w * w, *rest)`` -> grid tokens ``(B, H * W, *rest)`` (padding dropped)."""
        w, (H, W), (Hp, Wp) = self.window, self.grid, self.padded
        rest = windows.shape[2:]
        x = windows.view(-1, Hp // w, Wp // w, w, w, *rest).transpose(2, 3).reshape(-1, Hp, Wp, *rest)
        if self.shift:
            x = torch.roll(x, (self.shift, self.shift), (1, 2))
        return x[:, :H, :W].reshape(x.shape[0], H * W, *rest)

    @property
    def is_grid(self) -> bool:
        """Whether the windows are the grid itself (one window, no padding, no shift): window tokens ``(B, 1, w * w,
        ...)`` are then a view of the grid tokens ``(B, H * W, ...)``, in the same order."""
        return not self.shift and self.padded == tuple(self.grid) == (self.window, self.window)

    def gather_windows(self, x: Tensor) -> Tensor:
        """:meth:`partition` with padding 0 as one gather, per image: grid tokens ``(B, H * W, *rest)`` -> each
        image's windows ``(B, nW, w * w, *rest)`` (a view of partition's ``(B * nW, w * w, *rest)``), by a slot
        index cached per layout and device (a padded layout gathers its padding from a zero token appended to the
        grid); for values carried beside the tokens (a stream's)."""
        L = x.shape[1]
        if L != self.grid[0] * self.grid[1]:
            raise ValueError(f'{L} tokens do not fill the {self.grid} grid of this window layout')
        if self.padded != self.grid:
            x = F.pad(x, (0, 0) * (x.dim() - 2) + (0, 1))
        return x[:, _slot_sources(self, x.device)]

    def gather_grid(self, windows: Tensor) -> Tensor:
        """:meth:`reverse` as one gather, per image: windows ``(B, nW, w * w, *rest)`` (as :meth:`gather_windows`
        gives them) -> grid tokens ``(B, H * W, *rest)`` (padding dropped), by indices cached per layout and
        device."""
        return windows[(slice(None), ) + _token_slots(self, windows.device)]

    def attn_mask(self, device=None) -> Optional[Tensor]:
        """``(nW, w * w, w * w)`` additive mask of a shifted layout (0 within a region, -100
        across, as the official code), None without a shift. Cached per layout and device."""
        if not self.shift:
            return None
        return _shift_mask(self.padded, self.window, self.shift, torch.device(device or 'cpu'))

    def grid_index(self, device=None) -> Tensor:
        """``(nW, w * w)`` long: the flat grid index ``h * W + w`` of every window slot, -1 on padding."""
        H, W = self.grid
        idx = torch.arange(H * W, device=device, dtype=torch.float64).view(1, H * W)
        return self.partition(idx, pad_value=-1.).long().view(self.num_windows, -1)

    def to_dense(self, attn: Tensor) -> Tensor:
        """Window attention ``(B * nW, heads, w * w, w * w)`` -> grid attention ``(B, heads, H * W, H * W)``.

        Row ``i``, column ``j`` is the weight token ``i`` gives token ``j`` (0 for tokens in other
        windows); weights on padding tokens are dropped, so a row sums to 1 minus its padding share.
        """
        H, W = self.grid
        nW, n = self.num_windows, self.window**2
        heads = attn.shape[1]
        B = attn.shape[0] // nW
        index = self.grid_index(attn.device).view(1, nW, n)
        valid = (index >= 0).view(1, nW, 1, n, 1) & (index >= 0).view(1, nW, 1, 1, n)
        a = attn.view(B, nW, heads, n, n) * valid
        rows = index.clamp(min=0).view(1, nW, 1, n, 1).expand(B, nW, heads, n, n)
        cols = index.clamp(min=0).view(1, nW, 1, 1, n).expand(B, nW, heads, n, n)
        flat = (rows * (H * W) + cols).permute(0, 2, 1, 3, 4).reshape(B, heads, -1)
        out = attn.new_zeros(B, heads, H * W * H * W)
        out.scatter_add_(2, flat, a.permute(0, 2, 1, 3, 4).reshape(B, heads, -1))
        return out.view(B, heads, H * W, H * W)
