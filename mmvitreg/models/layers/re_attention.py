"""Re-attention of DeepViT."""

from typing import Optional

from torch import Tensor, nn

from .attention import MultiheadSelfAttention


class ReAttention(MultiheadSelfAttention):
    """Re-attention: multi-head attention maps re-mixed across heads (DeepViT Eq. 3).

    `DeepViT: Towards Deeper Vision Transformer <https://arxiv.org/abs/2103.11886>`_.

    .. math::
        \\mathrm{Re\\text{-}Attention}(Q, K, V) =
        \\mathrm{Norm}(\\Theta^\\top(\\mathrm{Softmax}(Q K^\\top / \\sqrt{d}))) V,

    where the learnable ``Θ ∈ R^{H×H}`` mixes the ``H`` attention maps along the head axis. The
    paper leaves the bias, the norm and the initialisation of ``Θ`` open; the defaults follow the
    official code (zhoudaquan/dvit_repo ``models/layers.py``):

    * ``Θ`` is ``reatten_matrix = nn.Conv2d(H, H, 1)`` **with bias** (``weight[:, :, 0, 0] = Θ^T``);
    * ``Norm`` is ``var_norm = nn.BatchNorm2d(H)`` (``norm='bn'``); ``norm='ln'`` is a LayerNorm over the heads
      (lucidrains' vit-pytorch), ``norm=None`` no norm;
    * no softmax after ``Θ``; attention dropout sits between the softmax and ``Θ``;
    * ``transform_scale=True`` multiplies the re-generated map by ``d ** -0.5`` (official ``reatten_scale``,
      used by DeepViT-S).

    The map is always explicit: the fused kernel cannot mix heads after the softmax.

    Args:
        embed_dims (int): Token channels ``C``.
        num_heads (int): Number of heads ``H``.
        norm (str, optional): ``'bn'`` (official), ``'ln'`` or None. Defaults to ``'bn'``.
        bias (bool): Bias of ``Θ``. Defaults to True (official).
        transform_scale (bool): Multiply the re-generated map by the qk scale. Defaults to False.
        **kwargs: The other arguments of :class:`~mmvitreg.models.layers.MultiheadSelfAttention` (``attn_drop``
            acts before ``Θ``).

    Shapes:
        ``x``: ``(B, N, C)`` -> ``(B, N, C)``; the map is ``(B, H, N, N)``.
    """

    fused = False
    NORMS = ('bn', 'ln', None)

    def __init__(
        self,
        embed_dims: int,
        num_heads: int,
        norm: Optional[str] = 'bn',
        bias: bool = True,
        transform_scale: bool = False,
        **kwargs,
    ):
        super().__init__(embed_dims, num_heads, **kwargs)
        if norm not in self.NORMS:
            raise ValueError(f'unknown re-attention norm {norm!r}; choose from {self.NORMS}')
        self.norm = norm
        self.reatten_matrix = nn.Conv2d(num_heads, num_heads, 1, 1, bias=bias)
        if norm == 'bn':
            self.var_norm = nn.BatchNorm2d(num_heads)
        elif norm == 'ln':
            self.var_norm = nn.LayerNorm(num_heads)
        self.reatten_scale = self.scale if transform_scale else 1.0

    def attention_map(self, q: Tensor, k: Tensor) -> Tensor:
        """``Norm(Θ^T A) * reatten_scale`` ``(B, H, N, N)`` with ``A`` the (dropped-out) softmax map of ``q, k``
        ``(B H, N, d)``."""
        attn = self.reatten_matrix(super().attention_map(q, k))
        if self.norm == 'bn':
            attn = self.var_norm(attn)
        elif self.norm == 'ln':
            attn = self.var_norm(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return attn * self.reatten_scale if self.reatten_scale != 1.0 else attn
