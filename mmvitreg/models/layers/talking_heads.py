"""Talking-heads attention."""

from torch import Tensor, nn

from .attention import MultiheadSelfAttention, head_logits


class TalkingHeadsAttention(MultiheadSelfAttention):
    """Talking-heads attention: learned head mixing before and after the softmax.

    `Talking-Heads Attention <https://arxiv.org/abs/2003.02436>`_, in the form DiversePatch's
    official models use by default (ChengyueGongR/PatchVisionTransformer ``deit/models.py``,
    ``use_talk=True``):

    .. math::
        A = P_{post}(\\mathrm{Softmax}(P_{pre}(Q K^\\top / \\sqrt{d}))),\\quad
        \\mathrm{out} = A V,

    where ``P_pre`` / ``P_post`` are ``nn.Linear(H, H)`` over the head axis (keys ``proj_pre``,
    ``proj_post``), **without bias** in DiversePatch (``bias=False``, the default); timm's CaiT uses
    a bias (``bias=True``). Attention dropout, if any, follows ``P_post`` (DiversePatch has none).

    Args:
        embed_dims (int): Token channels ``C``.
        num_heads (int): Number of heads ``H``.
        bias (bool): Bias of ``proj_pre`` and ``proj_post``. Defaults to False.
        **kwargs: The other arguments of :class:`~mmvitreg.models.layers.MultiheadSelfAttention` (``attn_drop``
            acts on the final map).

    Shapes:
        ``x``: ``(B, N, C)`` -> ``(B, N, C)``; the map is ``(B, H, N, N)``.
    """

    fused = False

    def __init__(self, embed_dims: int, num_heads: int, bias: bool = False, **kwargs):
        super().__init__(embed_dims, num_heads, **kwargs)
        self.proj_pre = nn.Linear(num_heads, num_heads, bias=bias)
        self.proj_post = nn.Linear(num_heads, num_heads, bias=bias)

    def attention_map(self, q: Tensor, k: Tensor) -> Tensor:
        """``P_post(Softmax(P_pre(Q K^T * scale)))``, then dropout, ``(B, H, N, N)`` for ``q, k`` ``(B H, N, d)``."""
        logits = head_logits(q, k, self.scale, self.num_heads).permute(0, 2, 3, 1)
        attn = self.proj_pre(logits).softmax(dim=-2)
        return self.attn_drop(self.proj_post(attn).permute(0, 3, 1, 2))
