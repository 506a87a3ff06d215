"""How a windowed attention (Swin) places a token grid into its windows: padding, cyclic shift, partition."""

import functools
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .patch_embed import token_grid


@functools.lru_cache(maxsize=64)
def _shift_mask(padded: Tuple[int, int], window: int, shift: int, device: torch.device) -> Tensor:
    """``(nW, w*w, w*w)`` additive mask (0 / -100) that keeps a shifted window's regions apart."""
    # region of each row / column: 0 before the last window, 1 in it before the shift, 2 after; no indexed
    # assignment, so that ONNX tracing folds it into a constant
    rows, cols = (
        (torch.arange(n, device=device) >= n - window).float() + (torch.arange(n, device=device) >= n - shift).float()
        for n in padded
    )
    region = (rows[:, None] * 3 + cols[None, :]).view(1, *padded, 1)
    ids = WindowLayout.cut(region, window).flatten(1)  # (nW, w*w)
    mask = ids.unsqueeze(1) - ids.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)


@functools.lru_cache(maxsize=64)
def _slot_sources(layout: 'WindowLayout', device: torch.device) -> Tensor:
    """``(nW, w * w)`` long: the grid token of every window slot, ``H * W`` (an appended zero token) on padding."""
    H, W = layout.grid
    return layout.grid_index(device).remainder(H * W + 1)  # -1 (padding) -> H * W


@functools.lru_cache(maxsize=64)
def _token_slots(layout: 'WindowLayout', device: torch.device) -> Tuple[Tensor, Tensor]:
    """``(H * W,)`` long twice: the window and the slot in it of every grid token (the inverse of
    :func:`_slot_sources`, whose real sources sort below the padding's ``H * W``)."""
    H, W = layout.grid
    positions = _slot_sources(layout, device).flatten().argsort()[: H * W]  # the flat slot holding each token
    return positions // layout.window**2, positions % layout.window**2


@dataclass(frozen=True)
class WindowLayout:
    """How a windowed block (Swin) places its ``(H, W)`` token grid into attention windows.

    `Swin Transformer <https://arxiv.org/abs/2103.14030>`_: the grid is zero-padded bottom/right to
    ``padded`` (multiples of ``window``), rolled by ``-shift`` on both axes (cyclic shift), and cut
    into ``nW`` windows of ``window * window`` tokens, row-major within a window and across
    windows. After a shift, :attr:`attn_mask` keeps tokens that were not neighbours apart.

    Args:
        grid (Tuple[int, int]): The block's token grid ``(H, W)``.
        window (int): Window side ``w``.
        shift (int): Cyclic shift (0 for a regular window block).

    Shapes:
        tokens on the grid ``(B, H * W, ...)``; in windows ``(B, nW, w * w, ...)``, per image (a view of
        mmpretrain's batch-major ``(B * nW, w * w, ...)``); a window attention map ``(B * nW, heads, w * w, w * w)``.
    """

    grid: Tuple[int, int]
    window: int
    shift: int = 0

    @property
    def padded(self) -> Tuple[int, int]:
        """The padded grid ``(Hp, Wp)``."""
        return tuple(g * self.window for g in token_grid(self.grid, self.window))

    @staticmethod
    def cut(x: Tensor, window: int) -> Tensor:
        """``(B, Hp, Wp, *rest)`` -> ``(B * nW, w, w, *rest)``."""
        B, Hp, Wp, *rest = x.shape
        x = x.view(B, Hp // window, window, Wp // window, window, *rest).transpose(2, 3)
        return x.reshape(-1, window, window, *rest)

    @property
    def is_grid(self) -> bool:
        """Whether the windows are the grid itself (one window, no padding, no shift)."""
        return not self.shift and self.padded == tuple(self.grid) == (self.window, self.window)

    def partition(self, x: Tensor) -> Tensor:
        """Grid tokens ``(B, H * W, *rest)`` -> each image's window tokens ``(B, nW, w * w, *rest)``, padding 0: one
        gather by a slot index cached per layout and device (padding from a zero token appended to the grid)."""
        L, rest = x.shape[1], x.shape[2:]
        if L != self.grid[0] * self.grid[1]:
            raise ValueError(f'{L} tokens do not fill the {self.grid} grid of this window layout')
        if self.is_grid:
            return x
        if self.padded != self.grid:
            x = F.pad(x, (0, 0) * len(rest) + (0, 1))
        return x[:, _slot_sources(self, x.device)]

    def reverse(self, windows: Tensor) -> Tensor:
        """Each image's window tokens ``(B, nW, w * w, *rest)`` -> grid tokens ``(B, H * W, *rest)`` (padding
        dropped): one gather, the inverse of :meth:`partition`."""
        return windows if self.is_grid else windows[(slice(None),) + _token_slots(self, windows.device)]

    def attn_mask(self, device=None) -> Optional[Tensor]:
        """``(nW, w * w, w * w)`` additive mask of a shifted layout (0 within a region, -100
        across, as the official code), None without a shift. Cached per layout and device."""
        if not self.shift:
            return None
        return _shift_mask(self.padded, self.window, self.shift, torch.device(device or 'cpu'))

    def grid_index(self, device=None) -> Tensor:
        """``(nW, w * w)`` long: the flat grid index ``h * W + w`` of every window slot, -1 on padding (the rows and
        columns of the padded grid rolled by ``-shift``, cut into windows)."""
        (H, W), (Hp, Wp) = self.grid, self.padded
        rows, cols = ((torch.arange(n, device=device) + self.shift) % n for n in (Hp, Wp))
        index = torch.where((rows[:, None] < H) & (cols[None, :] < W), rows[:, None] * W + cols[None, :], -1)
        return self.cut(index.view(1, Hp, Wp), self.window).flatten(1)
