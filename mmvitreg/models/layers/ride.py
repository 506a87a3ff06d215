"""The one entry point of every attention layer's core, and the ride: per-token values carried through it.

Every attention layer (:class:`~mmvitreg.models.layers.MultiheadSelfAttention`, re-attention, talking
heads, :class:`~mmvitreg.models.layers.WindowAttention`) computes its ``q, k, v`` and calls :func:`attend`
for ``Softmax(q k^T * scale + bias) v``: :func:`attend` decides between an explicit map, the fused kernel
carrying a ride and the public fused kernel. A trace's :class:`~mmvitreg.models.trace.TokenStream`
(TL-Align's labels) hands each block's attention its values as a :class:`Ride`, which :func:`attend` fills.
The layers know rides, not traces.
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
    windows in a Swin); :func:`attend` sets ``mixed`` ``(B', n, D)``:

    .. math::
        \\mathrm{mixed} = \\max\\big(0, \\tfrac{1}{H}\\textstyle\\sum_h A_h\\big)\\, \\mathrm{values},

    with ``A_h`` the map that mixes the attention's values, before attention dropout (re-attention:
    after ``Θ`` and its norm; only such maps have negative entries, a softmax map is unchanged by
    the ``max``). Everything runs detached, in float32, outside autograd: a ride never changes the
    model's gradients and keeps no map for the backward.

    Args:
        values (Tensor): ``(B', n, D)``.
    """

    def __init__(self, values: Tensor):
        self.values = values.detach().float()
        self.mixed: Optional[Tensor] = None


def softmax_map(q: Tensor, k: Tensor, scale: float, bias: Optional[Tensor] = None) -> Tensor:
    """``Softmax(q k^T * scale + bias)`` ``(B, H, n, n)`` for ``q, k`` ``(B, H, n, d)``, ``bias`` broadcastable
    to the logits (in the autograd graph, in the dtype of ``q, k``)."""
    logits = (q * scale) @ k.transpose(-2, -1)
    return (logits if bias is None else logits + bias).softmax(dim=-1)


def attend(q: Tensor, k: Tensor, v: Tensor, scale: float, *, bias: Optional[Tensor] = None, dropout_p: float = 0.,
           need_attn: bool = False, ride: Optional[Ride] = None,
           attention_map: Optional[Callable[[Tensor, Tensor], Tensor]] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """The core of every attention layer: ``A v`` with ``A = Softmax(q k^T * scale + bias)`` after dropout, or
    ``A = attention_map(q, k)``; fills ``ride.mixed`` from ``A`` before dropout (an ``attention_map``'s ``A``
    as it comes, with the dropout it applies inside).

    The one place that decides how (first match):

    1. **explicit** when a map is needed: ``attention_map`` is given (a map the fused kernel cannot make:
       re-attention, talking heads), ``need_attn``, or a ride with active dropout (the ride sees the map
       before dropout). ``A`` is materialised, ``x = dropout(A) v``, the ride takes the head mean of ``A``
       (never kept for the backward).
    2. **fused with the ride** for a ride without bias, ``q`` on the CPU in float32 and at most
       ``RIDE_CHANNELS`` value channels, where :func:`mmvitreg.compat.cpu_flash_attention_ops` gives PyTorch's
       private fused CPU kernel: the values ride as extra value channels of the same kernel call
       (:class:`_AttentionWithRide`), so the map is computed once.
    3. **fused**: ``F.scaled_dot_product_attention`` with ``bias`` as its additive mask; a ride takes the map
       from the detached ``q, k`` (and ``bias``) beside it, in float32 outside autograd.

    Windows: the ``G`` groups of a ``bias`` (Swin's ``nW`` windows of one image, consecutive in the batch)
    are folded into the head axis, ``q, k, v`` ``(B' / G, G * H, n, d)`` against a ``(1, G * H, n, n)``
    bias, so that the fused kernel broadcasts it over the images without a copy.

    Args:
        q, k, v (Tensor): ``(B', H, n, d)``.
        scale (float): Multiplies ``q k^T``.
        bias (Tensor, optional): Additive logits ``(G, H, n, n)`` (``G`` divides ``B'``; batch entry
            ``b`` takes group ``b % G``), e.g. Swin's relative position bias plus shift mask. Not with
            ``attention_map``.
        dropout_p (float): Dropout on the softmax map (0 outside training). An ``attention_map`` applies its
            own. Defaults to 0.
        need_attn (bool): Return the map. Defaults to False.
        ride (Ride, optional): Values ``(B', n, D)`` to mix with the head-mean map; ``ride.mixed`` is set.
        attention_map (Callable, optional): ``(q, k) -> A`` ``(B', H, n, n)``, dropout included; replaces
            the softmax map and always takes the explicit path.

    Returns:
        Tuple[Tensor, Optional[Tensor]]: ``x`` ``(B', H, n, d)`` and, with ``need_attn``, the map
        ``(B', H, n, n)`` (the softmax before dropout, or ``attention_map``'s), else None.
    """
    if bias is not None and attention_map is not None:
        raise ValueError('attend takes a bias or an attention_map, not both')
    B, H, n = q.shape[:3]
    if bias is not None:  # a decision on the bias, not on its shape, which jit tracing would freeze
        G = bias.shape[0]
        q, k, v = (t.reshape(B // G, G * H, n, -1) for t in (q, k, v))
        bias = bias.reshape(1, G * H, n, n)
    attn = None
    if attention_map is not None or need_attn or ride is not None and dropout_p > 0:
        if attention_map is None:
            attn = softmax_map(q, k, scale, bias)
            x = (F.dropout(attn, dropout_p) if dropout_p > 0 else attn) @ v
        else:
            attn = attention_map(q, k)
            x = attn @ v
        if bias is not None:
            attn = attn.view(B, H, n, n)
        if ride is not None:
            _mix_map(ride, attn)
    elif (ride is not None and bias is None and q.device.type == 'cpu' and q.dtype == torch.float32
          and ride.values.shape[-1] <= RIDE_CHANNELS and (ops := cpu_flash_attention_ops()) is not None):
        x, ride.mixed = _AttentionWithRide.apply(q, k, v, ride.values, scale, ops)
    else:
        x = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None if bias is None else bias.to(q.dtype), dropout_p=dropout_p, scale=scale)
        if ride is not None:
            _mix_beside(ride, q, k, scale, bias, H)
    if bias is not None:
        x = x.reshape(B, H, n, -1)
    return x, attn if need_attn else None


@torch.no_grad()
def _mix_beside(ride: Ride, q: Tensor, k: Tensor, scale: float, bias: Optional[Tensor], heads: int) -> None:
    """Set ``ride.mixed`` from ``Softmax(q k^T * scale + bias)`` recomputed in float32, with ``q, k``
    ``(B0, G * heads, n, d)`` (windows folded into the head axis) and ``bias`` broadcastable to the logits."""
    with torch.autocast(q.device.type, enabled=False):
        logits = (q.float() * scale) @ k.float().transpose(-2, -1)
        if bias is not None:
            logits += bias.float()
        n = logits.shape[-1]
        _mix_map(ride, logits.softmax(-1).view(-1, heads, n, n))


def _mix_map(ride: Ride, attn: Tensor) -> None:
    """Set ``ride.mixed`` from a map ``(B', heads, n, n)`` taken before attention dropout."""
    with torch.autocast(attn.device.type, enabled=False):
        ride.mixed = attn.detach().float().mean(1).clamp_(min=0) @ ride.values
