"""The ride: per-token values carried through an attention call, and how the call carries them.

A trace's :class:`~mmvitreg.models.trace.TokenStream` (TL-Align's labels) hands each block's attention its
values as a :class:`Ride`; :func:`~mmvitreg.models.layers.attend` fills it. The layers know rides, not traces.
Where the values fit (``RIDE_CHANNELS``) they ride *inside* the fused attention call as extra value channels
(:func:`attend_widened`), so the map is computed once and never materialised; a ride that needs the map itself
(wider values, attention dropout in training) takes it from the explicit path (:func:`mix_map`).
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

#: the most value channels a ride may add to a fused call (wider rides take the explicit map)
RIDE_CHANNELS = 8


class Ride:
    """Per-token values that ride along with one attention call, and what the attention made of them.

    Holds ``values`` ``(B', n, D)`` on the attention's token layout (``B' = B * nW`` windows in a Swin, or per
    image ``(B, nW, n, D)``); :func:`~mmvitreg.models.layers.attend` sets ``mixed`` in the same layout:

    .. math::
        \\mathrm{mixed} = \\max\\big(0, \\tfrac{1}{H}\\textstyle\\sum_h A_h\\big)\\, \\mathrm{values},

    with ``A_h`` the map that mixes the attention's values, before attention dropout (re-attention's may have
    negative entries; a softmax map is unchanged by the ``max``). A ride never changes the model's gradients.
    ``mixed`` is float32, computed in the attention's dtype by a fused call (under autocast as the official TL-Align
    code's AMP training). ``stochastic`` (set with ``mixed``) says whether every row of that map is known to sum
    to 1: True for a fused call (a softmax map), False for the explicit path.

    Args:
        values (Tensor): ``(B', n, D)`` or ``(B, nW, n, D)``.
    """

    def __init__(self, values: Tensor):
        self.values = (values.detach() if values.requires_grad else values).float()
        self.mixed: Optional[Tensor] = None
        self.stochastic = False


def attend_widened(qkv: Tensor, ride: Ride, scale: float, bias: Optional[Tensor] = None) -> Tensor:
    """``Softmax(q k^T * scale + bias) v`` ``(B0, G * heads, n, d)`` by ``F.scaled_dot_product_attention``, with
    the ride's values as extra value channels of the same call; sets ``ride.mixed`` (in its values' layout).

    ``qkv`` is a qkv projection ``(B', n, 3, heads, d)`` and ``ride.values`` ``(B', n, D)`` (or ``(B0, G, n, D)``);
    a ``bias`` ``(1, G * heads, n, n)`` folds ``G`` windows into the head axis (``B' = B0 * G``). The projection is
    widened in one op (the values padded to ``3P`` channels per token, seen by ``as_strided`` as
    ``(B', n, 3, heads, P)``): ``q, k`` get ``P`` zero channels and ``v`` the values (``d + P`` a multiple of 8, as
    the fused kernels prefer), so the logits, the map and the first ``d`` output channels are those of the
    unwidened call and the next ``D`` the per-head maps applied to the values.
    """
    Bw, n, _, heads, d = qkv.shape
    D = ride.values.shape[-1]
    P = -(d + D) // 8 * -8 - d  # D rounded up so that d + P is a multiple of 8
    values = F.pad(ride.values, (2 * P, P - D)).to(qkv.dtype)  # B' n tokens of 3P: zeros for q, k; v's P
    values = values.as_strided((Bw, n, 3, heads, P), (n * 3 * P, 3 * P, P, 0, 1))
    qkv = torch.cat((qkv, values), -1).permute(2, 0, 3, 1, 4)  # (3, B', H, n, d+P)
    G = 1 if bias is None else bias.shape[1] // heads
    q, k, v = (qkv if G == 1 else qkv.reshape(3, Bw // G, G * heads, n, d + P)).unbind(0)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    with torch.no_grad():  # (one split op would give both slices but costs three ops in the backward, not one)
        mixed = out[..., d : d + D]
        mixed = mixed.mean(1) if G == 1 else mixed.view(Bw // G, G, heads, n, D).mean(2)
        ride.mixed = (mixed if mixed.shape == ride.values.shape else mixed.view(ride.values.shape)).float()
        ride.stochastic = True
    return out[..., :d]


def mix_map(ride: Ride, attn: Tensor) -> None:
    """Set ``ride.mixed`` from a map ``(B', heads, n, n)`` taken before attention dropout (``ride.stochastic``
    False: the map may be one whose rows do not sum to 1)."""
    values = ride.values if ride.values.dim() == 3 else ride.values.view(attn.shape[0], attn.shape[-1], -1)
    with torch.autocast(attn.device.type, enabled=False):
        mixed = attn.detach().float().mean(1).clamp_(min=0) @ values  # (B', n, D)
    ride.mixed = mixed if values is ride.values else mixed.view(ride.values.shape)
    ride.stochastic = False
