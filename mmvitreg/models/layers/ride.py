"""The ride: per-token values carried through one attention call, and the fused CPU kernel call that carries them.

A trace's :class:`~mmvitreg.models.trace.TokenStream` (TL-Align's labels) hands each block's attention
its values as a :class:`Ride`; the attention layers
(:class:`~mmvitreg.models.layers.MultiheadSelfAttention`, re-attention, talking heads,
:class:`~mmvitreg.models.layers.WindowAttention`) fill :attr:`Ride.mixed` beside or inside their own
kernel call. The layers know rides, not traces.
"""
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ...compat import cpu_flash_attention_ops

cpu_flash_attention_ops()  # checked once here, so that torch.compile reads the result and never traces the check

#: the most value channels a ride may add to a fused call (2 cost the kernel ~9% at d = 64; wider rides go beside it)
RIDE_CHANNELS = 8


class _AttentionWithRide(torch.autograd.Function):
    """``Softmax(q k^T * scale) v`` ``(B, H, N, d)`` and, from the same map, its head mean applied to
    ``values`` ``(B, N, D)``, in one call of PyTorch's fused CPU attention; the backward is PyTorch's own
    for ``q, k, v``.

    The values ride as extra value channels: ``q, k, v`` ``(B, H, N, d)`` are widened to ``d + D``
    channels (``q, k`` with zeros, so the logits and the log-sum-exp are those of width ``d``; ``v``
    with the values). The first ``d`` output channels and the log-sum-exp are exactly
    what the unwidened kernel returns, so the backward runs the fused backward at width ``d`` from
    them. The values carry no gradient.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, values: Tensor, scale: float,
                ops: Tuple[Callable, Callable]) -> Tuple[Tensor, Tensor]:
        B, H, N, d = q.shape
        D = values.shape[-1]
        wide = q.new_empty(B, N, 3, H, d + D)  # the kernel's preferred (B, N, H, .) memory layout
        for i, t in enumerate((q, k, v)):
            wide[:, :, i, :, :d] = t.transpose(1, 2)
        wide[:, :, :2, :, d:] = 0
        wide[:, :, 2, :, d:] = values.unsqueeze(2)
        flash, ctx.flash_backward = ops
        out, lse = flash(*wide.permute(2, 0, 3, 1, 4).unbind(0), scale=scale)
        # the output in the unwidened kernel's memory layout (B, N, H, d): what its backward and a
        # transpose(1, 2).reshape(B, N, H * d) after it read without a copy
        x = out[..., :d].transpose(1, 2).contiguous().transpose(1, 2)
        mixed = out[..., d:d + D].mean(1)  # the head mean, (B, N, D)
        ctx.save_for_backward(q, k, v, x, lse)
        ctx.scale = scale
        ctx.mark_non_differentiable(mixed)
        return x, mixed

    @staticmethod
    def backward(ctx, grad_x: Tensor, grad_mixed: Optional[Tensor]):
        q, k, v, x, lse = ctx.saved_tensors
        grads = ctx.flash_backward(grad_x, q, k, v, x, lse, 0., False, scale=ctx.scale)
        return *grads, None, None, None


class Ride:
    """Per-token values that ride along with one attention call, and what the attention made of them.

    Holds ``values`` ``(B', n, D)`` on the attention's token layout (``B' = B`` in a ViT, ``B * nW``
    windows in a Swin) and receives ``mixed`` ``(B', n, D)``:

    .. math::
        \\mathrm{mixed} = \\max\\big(0, \\tfrac{1}{H}\\textstyle\\sum_h A_h\\big)\\, \\mathrm{values},

    with ``A_h`` the map that mixes the attention's values, before attention dropout (re-attention:
    after ``Θ`` and its norm; only such maps have negative entries, a softmax map is unchanged by
    the ``max``). Everything runs detached, in float32, outside autograd: a ride never changes the
    model's gradients and keeps no map for the backward.

    A fused attention without mask or dropout calls :meth:`attention` for its output: on the CPU in
    float32 with at most ``RIDE_CHANNELS`` value channels the values ride in the same kernel call
    (:class:`_AttentionWithRide`: the map is computed once; PyTorch's private CPU kernel, reached through
    :func:`mmvitreg.compat.cpu_flash_attention_ops`); elsewhere, or where that kernel is missing or changed,
    the public fused call is followed by :meth:`attend`. A fused attention with a mask (Swin's bias and
    shift mask) calls :meth:`attend` with its ``q, k`` beside its own kernel call; an explicit one calls
    :meth:`mix_with_map`.

    Args:
        values (Tensor): ``(B', n, D)``.
    """

    def __init__(self, values: Tensor):
        self.values = values.detach().float()
        self.mixed: Optional[Tensor] = None

    def attention(self, q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
        """``F.scaled_dot_product_attention(q, k, v, scale=scale)`` ``(B, H, N, d)`` for ``q, k, v``
        ``(B, H, N, d)`` (no mask, no dropout), with :attr:`mixed` set from the same softmax."""
        if (q.device.type == 'cpu' and q.dtype == torch.float32 and self.values.shape[-1] <= RIDE_CHANNELS
                and (ops := cpu_flash_attention_ops()) is not None):
            x, self.mixed = _AttentionWithRide.apply(q, k, v, self.values, scale, ops)
            return x
        x = F.scaled_dot_product_attention(q, k, v, scale=scale)
        self.attend(q, k, scale, q.shape[1])
        return x

    @torch.no_grad()
    def attend(self, q: Tensor, k: Tensor, scale: float, heads: int, bias: Optional[Tensor] = None) -> None:
        """Set :attr:`mixed` from ``Softmax(q k^T * scale + bias)`` with ``q, k`` ``(B0, G * heads, n, d)``
        (``G`` windows folded into the head axis, 1 without) and ``bias`` broadcastable to the logits."""
        with torch.autocast(q.device.type, enabled=False):
            logits = (q.float() * scale) @ k.float().transpose(-2, -1)
            if bias is not None:
                logits += bias.float()
            n = logits.shape[-1]
            self.mix_with_map(logits.softmax(-1).view(-1, heads, n, n))

    def mix_with_map(self, attn: Tensor) -> None:
        """Set :attr:`mixed` from an explicit map ``(B', heads, n, n)`` (taken before attention dropout)."""
        with torch.autocast(attn.device.type, enabled=False):
            self.mixed = attn.detach().float().mean(1).clamp_(min=0) @ self.values
