"""Cross-layer attention-map similarity and the count of "similar blocks" (DeepViT, Eq. 2).

Paper: Zhou et al., *DeepViT: Towards Deeper Vision Transformer*, https://arxiv.org/abs/2103.11886

For two blocks ``p`` and ``q``, head ``h`` and token ``t`` (Eq. 2)::

    M^{p,q}_{h,t} = <A^p_{h,:,t}, A^q_{h,:,t}> / (||A^p_{h,:,t}|| * ||A^q_{h,:,t}||)

where ``A_{h,:,t}`` is the column ``t`` of the attention map of head ``h``: how much input token
``t`` contributes to each of the ``N`` output tokens. With attention maps laid out as
``(B, heads, N_query, N_key)`` that column is ``attn[b, h, :, t]``.

"Similar blocks" (Table 4, Fig. 3(b), §5.2): the paper calls a block *unique* when "its attention
map's similarity ratio with adjacent layers is smaller than 90%", so a block is *similar* when that
ratio is at least ``ratio_threshold = 0.9``. The paper does not pin the similarity ratio down
further, so both readings are offered:

* ``vector_threshold=None`` (default): the ratio is the mean Eq. 2 similarity of the block's
  token-wise attention vectors with those of its adjacent blocks (the paper reports such means as
  percentages, e.g. "the similarity between different heads ... is all lower than 30%");
* ``vector_threshold=tau``: the ratio is the share of token-wise attention vectors whose Eq. 2
  similarity with the adjacent blocks is larger than ``tau`` (Fig. 3(a)'s "ratio of token-wise
  attention vectors with similarity larger than" a threshold; the paper gives no value for it).

"Adjacent" blocks are the ``neighbours`` nearest blocks on each side (1: ``p - 1`` and ``p + 1``;
the first and last block have one side only); a vector's similarity to them is the mean of its
Eq. 2 similarities to each (Fig. 3(a)'s "within nearest k transformer blocks").
"""

from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
from torch import Tensor


def normalized_columns(attn: Tensor, eps: float = 1e-12) -> Tensor:
    """Scale every token-wise attention vector ``attn[..., :, t]`` of ``(B, H, N, N)`` maps to unit norm.

    A zero column stays zero (its similarity to anything is then 0).
    """
    if attn.dim() != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f'expected attention maps of shape (B, heads, N, N), got {tuple(attn.shape)}')
    attn = attn.float()
    return attn / attn.norm(dim=-2, keepdim=True).clamp_min(eps)


def attention_similarity(attn_p: Tensor, attn_q: Tensor) -> Tensor:
    """Eq. 2 for two blocks: ``(B, H, N, N)`` maps -> ``(B, H, N)`` similarities ``M^{p,q}_{h,t}``."""
    if attn_p.shape != attn_q.shape:
        raise ValueError(f'attention maps differ in shape: {tuple(attn_p.shape)} vs {tuple(attn_q.shape)}')
    return (normalized_columns(attn_p) * normalized_columns(attn_q)).sum(-2)


def adjacent_blocks(block: int, num_blocks: int, neighbours: int = 1) -> List[int]:
    """The blocks within ``neighbours`` of ``block`` on either side, ``block`` itself excluded."""
    if neighbours < 1:
        raise ValueError(f'neighbours must be >= 1, got {neighbours}')
    lo, hi = max(0, block - neighbours), min(num_blocks - 1, block + neighbours)
    return [q for q in range(lo, hi + 1) if q != block]


@dataclass
class SimilarityResult:
    """What :class:`AttentionSimilarity` measured over a data set.

    Attributes:
        matrix (Tensor): ``(L, L)`` mean Eq. 2 similarity of every pair of blocks.
        adjacent (Tensor): ``(L,)`` mean Eq. 2 similarity of each block with its adjacent blocks.
        ratio (Tensor): ``(L,)`` similarity ratio of each block with its adjacent blocks (equal to
            ``adjacent`` unless a ``vector_threshold`` was given).
        similar (Tensor): ``(L,)`` bool, ``ratio >= ratio_threshold``.
        num_images (int): images the statistics were averaged over.
    """

    matrix: Tensor
    adjacent: Tensor
    ratio: Tensor
    similar: Tensor
    num_images: int

    @property
    def num_similar_blocks(self) -> int:
        """The paper's "#Similar Blocks" (Table 4, Table 5)."""
        return int(self.similar.sum())


class AttentionSimilarity:
    """Accumulate DeepViT's Eq. 2 cross-layer attention similarity over batches.

    Paper: https://arxiv.org/abs/2103.11886 (Eq. 2, Fig. 3, Table 4). See the module docstring for
    the formula and the definition of similar blocks.

    Every statistic is a mean over images, heads and tokens (the cls token included: Eq. 2 runs
    over all ``T`` tokens).

    Args:
        num_blocks (int): ``L``, the number of blocks whose maps each :meth:`update` receives.
        neighbours (int): how many blocks on each side count as adjacent. Defaults to 1.
        vector_threshold (float, optional): if given, the similarity ratio is the share of
            token-wise attention vectors whose similarity with the adjacent blocks exceeds it;
            if None, it is their mean similarity. Defaults to None.
        ratio_threshold (float): a block is similar when its ratio is at least this
            (the paper's 90%). Defaults to 0.9.
    """

    def __init__(
        self,
        num_blocks: int,
        neighbours: int = 1,
        vector_threshold: Optional[float] = None,
        ratio_threshold: float = 0.9,
    ):
        if num_blocks < 2:
            raise ValueError(f'cross-layer similarity needs at least 2 blocks, got {num_blocks}')
        self.num_blocks = num_blocks
        self.neighbours = neighbours
        self.adjacent_sets = [adjacent_blocks(p, num_blocks, neighbours) for p in range(num_blocks)]
        self.vector_threshold = vector_threshold
        self.ratio_threshold = ratio_threshold
        self._matrix_sum = torch.zeros(num_blocks, num_blocks, dtype=torch.float64)
        self._ratio_sum = torch.zeros(num_blocks, dtype=torch.float64)
        self._num_vectors = 0
        self._num_images = 0

    def update(self, attn: Sequence[Tensor]) -> None:
        """Add one batch: ``attn[p]`` is the ``(B, H, N, N)`` attention map of block ``p``."""
        if len(attn) != self.num_blocks:
            raise ValueError(f'expected the attention maps of {self.num_blocks} blocks, got {len(attn)}')
        cols = torch.stack([normalized_columns(a) for a in attn])  # (L, B, H, N, N)
        b, h, _, n = cols.shape[1:]
        flat = cols.flatten(1)
        # sum over (b, h, t) of M^{p,q}_{h,t} for every pair at once: one (L, X) @ (X, L) product
        self._matrix_sum += (flat @ flat.T).double().cpu()
        pair_sims = {}  # Eq. 2 per vector, (B, H, N), for adjacent pairs only, each computed once
        for p, adjacent in enumerate(self.adjacent_sets):
            for q in adjacent:
                if (q, p) not in pair_sims:
                    pair_sims[(p, q)] = (cols[p] * cols[q]).sum(-2)
            per_vector = torch.stack([pair_sims.get((p, q), pair_sims.get((q, p))) for q in adjacent]).mean(0)
            if self.vector_threshold is not None:
                per_vector = (per_vector > self.vector_threshold).float()
            self._ratio_sum[p] += per_vector.double().sum().cpu()
        self._num_vectors += b * h * n
        self._num_images += b

    def compute(self) -> SimilarityResult:
        """The means over everything :meth:`update` received."""
        if self._num_vectors == 0:
            raise RuntimeError('no attention maps were added: call update() first')
        matrix = (self._matrix_sum / self._num_vectors).float()
        adjacent = torch.stack([matrix[p, qs].mean() for p, qs in enumerate(self.adjacent_sets)])
        ratio = (self._ratio_sum / self._num_vectors).float()
        return SimilarityResult(
            matrix=matrix,
            adjacent=adjacent,
            ratio=ratio,
            similar=ratio >= self.ratio_threshold,
            num_images=self._num_images,
        )
