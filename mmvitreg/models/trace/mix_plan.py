"""A two-image mixing plan: what a batch augment draws and a backbone or the data preprocessor applies."""

from dataclasses import dataclass
from typing import Optional, Tuple

from torch import Tensor


@dataclass
class MixPlan:
    """A two-image token-mixing plan, drawn once per batch by a batch augment: every mixed token is
    ``m * own + (1 - m) * partner``, so every token label stays ``w * y_own + (1 - w) * y_partner``.

    Args:
        index (Tensor): ``(B,)`` long, the partner of each sample in the batch.
        mask (Tensor): ``(B, Hg, Wg)`` float on the token grid, 1 where the token is the sample's own, 0 where it
            is the partner's (values in between are allowed).
        pixel_mask (Tensor, optional): ``(B, H, W)`` float, set when the data preprocessor mixed the *images* with
            it (CutMix for TL-Align, :meth:`mix_images`); ``mask`` is then each token's share of own pixels. None:
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
            raise ValueError(
                f'the pixel mask is {tuple(self.pixel_mask.shape[-2:])} but the images are {tuple(x.shape[-2:])}'
            )
        m = self.pixel_mask.to(x.dtype).unsqueeze(1)
        return x * m + x[self.index] * (1 - m)

    @property
    def lam(self) -> Tensor:
        """``(B,)`` share of each sample's own tokens: the mean of its mask (MixToken Eq. 10)."""
        return self.mask.flatten(1).mean(1)

    def check_grid(self, grid: Tuple[int, int], what: str) -> None:
        """The one grid check of a plan: fail unless its mask lies on ``grid`` ``(Hg, Wg)`` (``what`` names the
        grid's owner in the message)."""
        if tuple(grid) != tuple(self.mask.shape[-2:]):
            raise ValueError(
                f'the mixing plan covers a {tuple(self.mask.shape[-2:])} token grid but {what} '
                f"{tuple(grid)}: set the plan's patch_size to the backbone's token stride"
            )

    def mix_tokens(self, x: Tensor) -> Tensor:
        """Mix a token sequence ``(B, Hg * Wg, C)`` laid out row-major on the plan's grid (which
        :meth:`~mmvitreg.models.trace.TokenTrace.start` checks against the backbone's first)."""
        m = self.mask.to(x.dtype).flatten(1).unsqueeze(-1)
        return x * m + x[self.index] * (1 - m)

    def mix_labels(self, y: Tensor) -> Tensor:
        """Mix per-image labels ``(B, K)`` by each sample's own share (MixToken Eq. 10):
        ``lam * y + (1 - lam) * y[index]``, ``lam`` the mask mean; integer (one-hot) labels come back as floats."""
        y = y if y.is_floating_point() else y.float()
        lam = self.lam.to(y.dtype).unsqueeze(1)
        return y * lam + y[self.index] * (1 - lam)
