"""The ride: per-token values carried through an attention call, and the kernels that carry them.

A trace's :class:`~mmvitreg.models.trace.TokenStream` (TL-Align's labels) hands each block's attention its
values as a :class:`Ride`; :func:`~mmvitreg.models.layers.attend`, the one entry point of every attention
layer's core, fills it with one of the kernels below. The layers know rides, not traces.

The values ride *inside* the fused attention call as extra value channels wherever they fit
(``RIDE_CHANNELS``): ``q, k`` are widened with zeros (so the logits are those of width ``d``) and ``v``
with the values, and the extra output channels are the map applied to the values, from the same map the
tokens attend with, computed once and never materialised:

* :func:`attend_widened`: PyTorch's public ``F.scaled_dot_product_attention`` on any device and dtype, with
  or without a bias (the GPU path: flash / memory-efficient kernels; the backward runs at the widened width);
* :class:`_AttentionWithRide`: PyTorch's private fused CPU kernel in float32 without a bias, whose backward
  runs at width ``d`` (a little faster on the CPU; reached only through
  :func:`mmvitreg.compat.cpu_flash_attention_ops`, which checks it once and falls back to the public path).

Wider rides (a ``C``-dimensional label stream) take the map beside the fused call (:func:`mix_beside`).
"""
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

#: the most value channels a ride may add to a fused call (2 cost the kernel ~9% at d = 64; wider rides go beside it)
RIDE_CHANNELS = 8


class Ride:
    """Per-token values that ride along with one attention call, and what the attention made of them.

    Holds ``values`` ``(B', n, D)`` on the attention's token layout (``B' = B`` in a ViT, ``B * nW``
    windows in a Swin); :func:`~mmvitreg.models.layers.attend` sets ``mixed`` ``(B', n, D)``:

    .. math::
        \\mathrm{mixed} = \\max\\big(0, \\tfrac{1}{H}\\textstyle\\sum_h A_h\\big)\\, \\mathrm{values},

    with ``A_h`` the map that mixes the attention's values, before attention dropout (re-attention:
    after ``Θ`` and its norm; only such maps have negative entries, a softmax map is unchanged by
    the ``max``). A ride never changes the model's gradients and keeps no map for the backward. ``values``
    are kept in float32 and ``mixed`` is float32; a fused call computes it in the attention's dtype (under
    bf16 / fp16 autocast the map itself is bf16 / fp16, as in the official TL-Align code's AMP training,
    which mixes its labels with the fp16 map), the explicit and beside paths in float32.

    Args:
        values (Tensor): ``(B', n, D)``.
    """

    def __init__(self, values: Tensor):
        self.values = values.detach().float()
        self.mixed: Optional[Tensor] = None

    @property
    def fits(self) -> bool:
        """Whether the values fit a fused call as extra value channels (at most ``RIDE_CHANNELS``)."""
        return self.values.shape[-1] <= RIDE_CHANNELS


def attend_widened(q: Tensor, k: Tensor, v: Tensor, ride: Ride, scale: float, heads: int,
                   bias: Optional[Tensor] = None) -> Tensor:
    """``Softmax(q k^T * scale + bias) v`` ``(B0, G * heads, n, d)`` by ``F.scaled_dot_product_attention``, with
    the ride's values as extra value channels of the same call; sets ``ride.mixed`` ``(B', n, D)``.

    ``q, k, v`` are ``(B0, G * heads, n, d)`` (``G`` windows folded into the head axis, ``B' = B0 * G``; ``G = 1``
    without windows; ``q`` may have another number of tokens than ``k, v``) and ``ride.values`` ``(B', n, D)``
    on the tokens of ``k, v``. ``q, k`` get ``P`` zero channels and ``v`` the values
    (repeated per head, zero-padded to ``P``, ``d + P`` a multiple of 8 as the fused kernels prefer): the
    logits, the map and the first ``d`` output channels are those of the unwidened call, the next ``D`` the
    per-head maps applied to the values, whose head mean is ``ride.mixed``. The values carry no gradient; the
    backward is the kernel's own at width ``d + P``.
    """
    B0, GH, n, d = k.shape
    D = ride.values.shape[-1]
    P = -(d + D) // 8 * -8 - d  # D rounded up so that d + P is a multiple of 8
    values = ride.values.to(v.dtype).view(B0, GH // heads, 1, n, D).expand(-1, -1, heads, -1, -1)
    values = F.pad(values.reshape(B0, GH, n, D), (0, P - D))
    pad = (0, P)
    out = F.scaled_dot_product_attention(F.pad(q, pad), F.pad(k, pad), torch.cat((v, values), -1),
                                         attn_mask=bias, scale=scale)
    ride.mixed = out[..., d:d + D].detach().float().unflatten(1, (GH // heads, heads)).mean(2).flatten(0, 1)
    return out[..., :d]


class _AttentionWithRide(torch.autograd.Function):
    """``Softmax(q k^T * scale) v`` ``(B, H, N, d)`` and, from the same map, its head mean applied to
    ``values`` ``(B, N, D)``, in one call of PyTorch's fused CPU attention; the backward is PyTorch's own
    for ``q, k, v`` at width ``d``.

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


def attend_cpu_kernel(q: Tensor, k: Tensor, v: Tensor, ride: Ride, scale: float,
                      ops: Tuple[Callable, Callable]) -> Tensor:
    """:func:`attend_widened` without a bias through PyTorch's private fused CPU kernel (float32, ``q, k, v``
    ``(B, H, n, d)``), whose backward runs at width ``d``; sets ``ride.mixed``."""
    x, ride.mixed = _AttentionWithRide.apply(q, k, v, ride.values, scale, ops)
    return x


@torch.no_grad()
def mix_beside(ride: Ride, q: Tensor, k: Tensor, scale: float, bias: Optional[Tensor], heads: int) -> None:
    """Set ``ride.mixed`` from ``Softmax(q k^T * scale + bias)`` recomputed in float32, with ``q, k``
    ``(B0, G * heads, n, d)`` (windows folded into the head axis) and ``bias`` broadcastable to the logits."""
    with torch.autocast(q.device.type, enabled=False):
        logits = (q.float() * scale) @ k.float().transpose(-2, -1)
        if bias is not None:
            logits += bias.float()
        n = logits.shape[-1]
        mix_map(ride, logits.softmax(-1).view(-1, heads, n, n))


def mix_map(ride: Ride, attn: Tensor) -> None:
    """Set ``ride.mixed`` from a map ``(B', heads, n, n)`` taken before attention dropout."""
    with torch.autocast(attn.device.type, enabled=False):
        ride.mixed = attn.detach().float().mean(1).clamp_(min=0) @ ride.values
