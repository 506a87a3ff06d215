"""The token trace: what travels with the tokens through an mmvitreg backbone.

All techniques of this package need something to ride along with the tokens:

* MixToken / TL-Align mix the token maps of two images right after patch embedding, before the
  position embedding (the *mixing plan* goes in);
* token labeling, DiversePatch, DRLoc and the diagnostics read the tokens of chosen blocks and,
  for some, their attention maps (the *taps* come out).

A backbone's ``forward(x, trace=None)`` takes an optional :class:`TokenTrace`. Without one the
backbone is an ordinary backbone (same outputs, fused attention, no extra work). With one, it
applies ``trace.mix`` to the patch-token map, and records into ``trace.tokens`` /
``trace.attn`` the outputs / attention maps of the blocks listed in ``trace.token_layers`` /
``trace.attn_layers``, plus ``trace.grid`` and ``trace.num_extra_tokens``.
"""
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

from torch import Tensor


@dataclass
class MixPlan:
    """A two-image token-mixing plan, drawn once per batch by a batch augment.

    Every mixed token is ``m * own + (1 - m) * partner``, so every token label stays of the form
    ``w * y_own + (1 - w) * y_partner``.

    Args:
        index (Tensor): ``(B,)`` long, the partner of each sample in the batch.
        mask (Tensor): ``(B, Hg, Wg)`` float on the token grid, 1 where the token is the sample's
            own, 0 where it comes from the partner (values in between are allowed).
    """

    index: Tensor
    mask: Tensor

    @property
    def lam(self) -> Tensor:
        """``(B,)`` share of each sample's own tokens: the mean of its mask (MixToken Eq. 10)."""
        return self.mask.flatten(1).mean(1)

    def mix(self, x: Tensor) -> Tensor:
        """Mix a token map ``(B, C, Hg, Wg)`` or a dense map ``(B, K, Hg, Wg)`` with the plan."""
        if x.shape[-2:] != self.mask.shape[-2:]:
            raise ValueError(f'the mixing mask covers a {tuple(self.mask.shape[-2:])} token grid but the '
                             f'map to mix is {tuple(x.shape[-2:])}')
        m = self.mask.to(x.dtype).unsqueeze(1)
        return x * m + x[self.index] * (1 - m)

    def mix_labels(self, y: Tensor) -> Tensor:
        """Mix per-image labels ``(B, K)`` by each sample's own share (MixToken Eq. 10).

        ``y_hat = lam * y + (1 - lam) * y[index]`` with ``lam`` the mask mean; integer (one-hot)
        labels come back as floats.
        """
        y = y if y.is_floating_point() else y.float()
        lam = self.lam.to(y.dtype).unsqueeze(1)
        return y * lam + y[self.index] * (1 - lam)


@dataclass
class TokenTrace:
    """Travels with one batch through a backbone's forward.

    In:
        mix (MixPlan, optional): mixing plan applied to the patch-token map after the patch
            embedding and before the position embedding.
        token_layers (Sequence[int]): blocks whose output tokens to record (negative indices count
            from the last block).
        attn_layers (Sequence[int]): blocks whose attention maps to record; only these blocks leave
            the fused attention kernel.

    Out (filled by the backbone):
        grid (Tuple[int, int]): the token grid ``(Hg, Wg)``.
        num_extra_tokens (int): tokens before the patch tokens (1 for a cls token, else 0).
        tokens (Dict[int, Tensor]): block index (non-negative) -> ``(B, N, C)`` tokens after the
            block, extra tokens first, ``N = num_extra_tokens + Hg * Wg``.
        attn (Dict[int, Tensor]): block index (non-negative) -> ``(B, heads, N, N)`` attention map
            after softmax (and, for re-attention, after the head transform and its norm).
    """

    mix: Optional[MixPlan] = None
    token_layers: Sequence[int] = ()
    attn_layers: Sequence[int] = ()
    grid: Tuple[int, int] = (0, 0)
    num_extra_tokens: int = 0
    tokens: Dict[int, Tensor] = field(default_factory=dict)
    attn: Dict[int, Tensor] = field(default_factory=dict)

    def patch_tokens(self, layer: int) -> Tensor:
        """``(B, Hg * Wg, C)`` patch tokens recorded after block ``layer`` (extra tokens dropped)."""
        return self.tokens[layer][:, self.num_extra_tokens:]

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

