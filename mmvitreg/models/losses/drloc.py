"""DRLoc: the dense relative localization loss of Liu et al. (NeurIPS 2021)."""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import Tensor, nn

from mmvitreg.registry import MODELS

from ..trace import TokenTrace, TraceRequest

MODES = ('l1', 'ce', 'cbr')
TARGETS = ('normalized', 'abs', 'signed')
REDUCTIONS = ('sum', 'mean')
#: grids of up to SMALL_GRID tokens draw distinct pairs as the top m of (HW)^2 numbers (see DRLoc._distinct)
SMALL_GRID = 1024
GRID_POOLS = {
    None: None,
    'avg2x2': dict(kernel_size=2, stride=2),  # paper §3: "2x2 average pooling"
    'avg3x3': dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),  # official t2t.py / cvt.py
}


class DRLocHead(nn.Module):
    """The localization MLP ``f`` of one map: ``(P, 2C)`` pairs -> ``(P, 2)`` (``l1``) or ``(P, 2, num_bins)``.

    ``l1`` (``num_bins=0``): ``Linear(2C, h) - ReLU - Linear(h, h) - ReLU - Linear(h, 2)`` (paper §4, ``h = 512``
    official). ``ce`` / ``cbr`` (official ``aux_modules.py``): the last layer ``Linear(h, h)``, then two
    unshared ``Linear(h, num_bins)`` heads, one per axis.
    """

    def __init__(self, in_channels: int, hidden: int, num_bins: int = 0):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(2 * in_channels, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden if num_bins else 2),
        )
        self.bins = nn.ModuleList(nn.Linear(hidden, num_bins) for _ in range(2)) if num_bins else None

    def forward(self, pairs: Tensor) -> Tensor:
        x = self.trunk(pairs)
        return x if self.bins is None else torch.stack([b(x) for b in self.bins], dim=1)


@MODELS.register_module()
class DRLoc(BaseModule):
    r"""Dense relative localization loss, an auxiliary loss of any backbone with a final token grid.

    `Efficient Training of Visual Transformers with Small Datasets
    <https://arxiv.org/abs/2106.03746>`_ (Liu et al., NeurIPS 2021), §4. For each image's final
    ``k x k`` grid of embeddings ``G_x = {e_ij}``, ``m`` pairs ``(e_ij, e_ph)`` are sampled, each
    concatenated pair goes through a small MLP ``f`` that predicts ``(d_u, d_v)``, and (Eq. 1-2)

    .. math::
        t_u = \frac{|i - p|}{k}, \quad t_v = \frac{|j - h|}{k}, \qquad
        L_{drloc} = \lambda \sum_{x \in B} \mathbb{E}_{(e_{ij}, e_{ph}) \sim G_x}
            \big\| (t_u, t_v) - (d_u, d_v) \big\|_1

    Defaults follow the **paper**: normalised targets, the L1 norm over the two axes, the mean over the
    ``m = 64`` distinct, uniformly drawn pairs of an image, **summed** over the batch, a fixed ``λ``. The
    official code's forms (yhlleo/VTs-Drloc; configs/drloc/README.md) are the options below; its λ schedule is
    :class:`~mmvitreg.engine.hooks.DRLocWeightScheduleHook`, which sets :attr:`loss_weight`.

    The grid ``(B, C, H, W)`` of a dense crop may be non-square and change per batch: the normalised target
    divides each axis by its own side. Several maps: one MLP each, their losses summed. Computed in float32.
    Positions come from torch's global generator (mmengine seeds it per rank; the official module at import).

    Args:
        in_channels (int | Sequence[int]): Channels ``C`` of each feature map; checked against the backbone.
        layers (Sequence[int], optional): Trace blocks whose patch-token maps ``trace.token_map(i)`` to use
            (ViT family: before the final norm; Swin: a stage's last block before its norm). Defaults to None.
        stages (Sequence[int], optional): Trace stages whose outputs after down-sampling to use (Swin's official
            ``--use_multiscale`` maps; not with ``layers``). Defaults to None.
        feat_indices (Sequence[int]): Without ``layers`` and ``stages``, the backbone outputs to use, no trace:
            maps (ResNet) or raw ``(B, E + N, C)`` tokens on a square grid (``T2T_ViT(out_type='raw')`` with
            :class:`~mmvitreg.models.necks.ClsTokenNeck`). Defaults to (-1,).
        num_extra_tokens (int): Leading tokens dropped from raw tokens. Defaults to 1.
        num_pairs (int): ``m`` pairs per image. Defaults to 64 (paper and official).
        loss_weight (float): ``λ``; paper: 0.1 for T2T / CvT, 0.5 for Swin. Defaults to 0.5.
        mode (str): ``'l1'`` (paper), or official ``'ce'`` (cross-entropy over offset bins per axis) or
            ``'cbr'`` (cycle-back regression: ``(μ - t)^2 / σ^2 + 0.001 log σ^2``, ``μ, σ^2`` of the softmax
            over the bins), each axis's mean summed, on integer targets. Defaults to 'l1'.
        target (str): ``'normalized'`` (paper Eq. 1, ``|Δ| / k``), official ``'abs'`` (``|Δ|``, ``--use_abs``)
            or ``'signed'`` (``Δ + (k - 1)``). Defaults to 'normalized'.
        reduction (str): ``'sum'`` over images (paper Eq. 2) or official ``'mean'`` (``F.l1_loss`` over
            ``B·m·2``; the dense configs' choice, as the sum grows with the per-GPU batch). Defaults to 'sum'.
        replacement (bool): Official independent endpoints with replacement. Defaults to False.
        grid_pool (str, optional): None, ``'avg2x2'`` (paper) or ``'avg3x3'`` (official T2T / CvT 14x14 ->
            7x7). Defaults to None.
        hidden_channels (int): Width of the MLP. Defaults to 512 (official).
        num_bins (int | Sequence[int], optional): ``ce`` / ``cbr`` only: the grid side ``k`` the bin heads are
            sized for (``k`` bins per axis for ``abs``, ``2k - 1`` for ``signed``; official: 7 for Swin, 14 for
            the others, multi-scale Swin ``(56, 28, 14, 7)``), at least the longest side a crop gives; one per
            map, or one for all. Defaults to None.
        loss_name (str): Key of the returned loss. Defaults to 'loss_drloc'.
        init_cfg (dict, optional): Initialisation of the MLPs. Defaults to PyTorch's (official for CvT / ViT /
            ResNet; Swin / T2T's official models use ``dict(type='TruncNormal', layer='Linear', std=0.02)``).
    """

    def __init__(
        self,
        in_channels: Union[int, Sequence[int]],
        layers: Optional[Sequence[int]] = None,
        stages: Optional[Sequence[int]] = None,
        feat_indices: Sequence[int] = (-1,),
        num_extra_tokens: int = 1,
        num_pairs: int = 64,
        loss_weight: float = 0.5,
        mode: str = 'l1',
        target: str = 'normalized',
        reduction: str = 'sum',
        replacement: bool = False,
        grid_pool: Optional[str] = None,
        hidden_channels: int = 512,
        num_bins: Optional[Union[int, Sequence[int]]] = None,
        loss_name: str = 'loss_drloc',
        init_cfg: Optional[dict] = None,
    ):
        super().__init__(init_cfg=init_cfg)
        choices = dict(mode=MODES, target=TARGETS, reduction=REDUCTIONS, grid_pool=tuple(GRID_POOLS))
        for name, value in dict(mode=mode, target=target, reduction=reduction, grid_pool=grid_pool).items():
            if value not in choices[name]:
                raise ValueError(f'DRLoc {name} must be one of {choices[name]}, got {value!r}')
        if mode != 'l1' and target == 'normalized':
            raise ValueError(f"DRLoc mode={mode!r} classifies integer offsets: set target='abs' or 'signed'")
        if layers is not None and stages is not None:
            raise ValueError(f'DRLoc reads layers={tuple(layers)} or stages={tuple(stages)}, not both')
        if not isinstance(num_pairs, int) or num_pairs < 1:
            raise ValueError(f'num_pairs must be a positive int, got {num_pairs!r}')
        in_channels = (in_channels,) if isinstance(in_channels, int) else tuple(in_channels)
        kind = 'layers' if layers is not None else 'stages' if stages is not None else 'feat_indices'
        sources = tuple(dict(layers=layers, stages=stages, feat_indices=feat_indices)[kind])
        if len(sources) != len(in_channels) or not sources:
            raise ValueError(f'DRLoc reads {len(sources)} map(s) ({kind}={sources}): give one channel count per map')
        num_bins = (num_bins,) * len(sources) if num_bins is None or isinstance(num_bins, int) else tuple(num_bins)
        if mode != 'l1' and (len(num_bins) != len(sources) or not all(isinstance(k, int) and k >= 2 for k in num_bins)):
            raise ValueError(f'DRLoc mode={mode!r} needs num_bins, a grid side >= 2 or one per map, got {num_bins!r}')
        self.layers = tuple(layers) if layers is not None else None
        self.stages = tuple(stages) if stages is not None else None
        self.feat_indices, self.num_extra_tokens = tuple(feat_indices), num_extra_tokens
        self.num_pairs, self.loss_weight, self.mode = num_pairs, loss_weight, mode
        self.target, self.reduction, self.replacement = target, reduction, replacement
        self.pool_cfg, self.num_bins, self.loss_name = GRID_POOLS[grid_pool], num_bins, loss_name
        bins = [0 if mode == 'l1' else (k if target == 'abs' else 2 * k - 1) for k in num_bins]
        self.heads = nn.ModuleList(DRLocHead(c, hidden_channels, b) for c, b in zip(in_channels, bins))
        # every map's width is checked against the backbone's when the model is built
        keys = dict(
            layers=('token_layers', 'token_channels'),
            stages=('stages', 'stage_channels'),
            feat_indices=('outputs', 'out_channels'),
        )[kind]
        self.trace_request = TraceRequest(**dict(zip(keys, (sources, in_channels))))

    def feature_maps(self, feats: Tuple[Tensor, ...], trace: Optional[TokenTrace]) -> List[Tensor]:
        """The ``(B, C, k, k)`` grids the loss samples from (after ``grid_pool``)."""
        if self.layers is not None:
            maps = [trace.token_map(i) for i in self.layers]
        elif self.stages is not None:
            maps = [trace.stage_map(i) for i in self.stages]
        else:
            maps = [self._as_map(feats[i]) for i in self.feat_indices]
        if self.pool_cfg is not None:
            maps = [F.avg_pool2d(m, **self.pool_cfg) for m in maps]
        return maps

    def _as_map(self, feat: Tensor) -> Tensor:
        """A backbone output as a ``(B, C, H, W)`` map: maps pass; raw ``(B, E + N, C)`` tokens lose their
        ``num_extra_tokens`` leading tokens and go on a square grid."""
        if feat.dim() == 3:
            tokens = feat[:, self.num_extra_tokens :]
            side = int(round(tokens.shape[1] ** 0.5))
            if side * side == tokens.shape[1]:
                return tokens.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], side, side)
        if feat.dim() != 4:
            raise ValueError(f"DRLoc reads maps or square-grid tokens, not {tuple(feat.shape)}: set out_type='featmap'")
        return feat

    def sample_pairs(self, batch: int, grid: Tuple[int, int], device) -> Tuple[Tensor, Tensor]:
        """``m`` pairs per image: two ``(B, m, 2)`` long tensors of (row, col) positions.

        Paper default: ``m`` distinct ordered pairs of positions, uniform over all ``(HW)^2``; with
        ``replacement`` both endpoints are drawn independently (official)."""
        H, W = grid
        n = H * W
        if self.replacement:
            flat = torch.randint(n, (batch, self.num_pairs, 2), device=device)
        else:
            if self.num_pairs > n * n:
                raise ValueError(f'DRLoc: {self.num_pairs} distinct pairs > {n * n} on {H}x{W}: set replacement=True')
            pair = self._distinct(batch, n * n, device)
            flat = torch.stack((pair // n, pair % n), dim=-1)
        pos = torch.stack((flat // W, flat % W), dim=-1)  # (B, m, 2 endpoints, 2 coords)
        return pos[:, :, 0], pos[:, :, 1]

    def _distinct(self, batch: int, count: int, device) -> Tensor:
        """``(B, m)`` distinct numbers of ``0 .. count - 1`` per row, uniformly: the ``m`` largest of ``count``
        uniform numbers (``count <= SMALL_GRID**2``, or ``m`` near ``count``), else, in memory ``O(m)``, the first
        ``m`` distinct of ``2m`` independent draws, drawn again in the (rare) case that a row has fewer."""
        m = self.num_pairs
        if count <= SMALL_GRID**2 or 4 * m > count:
            return torch.rand(batch, count, device=device).topk(m, dim=1).indices
        while True:
            drawn = torch.randint(count, (batch, 2 * m), device=device)
            values, order = drawn.sort(dim=1, stable=True)
            again = torch.zeros_like(drawn, dtype=torch.bool)
            again[:, 1:] = values[:, 1:] == values[:, :-1]  # a value's later draws
            again = torch.zeros_like(again).scatter_(1, order, again)
            if int((~again).sum(1).min()) >= m:
                break
        first = torch.arange(2 * m, device=device) + 2 * m * again  # first draws first, in draw order
        return drawn.gather(1, first.topk(m, dim=1, largest=False).indices)

    def pair_loss(self, head: DRLocHead, fmap: Tensor, num_bins: Optional[int] = None) -> Tensor:
        """The loss of one ``(B, C, H, W)`` map (before ``λ``); ``num_bins`` its heads' grid side."""
        B, C, H, W = fmap.shape
        if min(H, W) < 2:
            raise ValueError(f'DRLoc needs a grid of at least 2x2, got {H}x{W}: tap an earlier stage or drop grid_pool')
        if self.mode != 'l1' and max(H, W) > num_bins:
            raise ValueError(f'DRLoc num_bins={num_bins} is under the {H}x{W} grid side: set num_bins >= {max(H, W)}')
        p1, p2 = self.sample_pairs(B, (H, W), fmap.device)
        tokens = fmap.float().flatten(2).transpose(1, 2)  # (B, HW, C)
        pairs = [tokens.gather(1, (p[..., 0] * W + p[..., 1]).unsqueeze(-1).expand(-1, -1, C)) for p in (p1, p2)]
        pred = head(torch.cat(pairs, dim=-1).flatten(0, 1)).float().view(B, self.num_pairs, 2, -1)
        delta = (p1 - p2).float()
        # per-axis offsets and scales from Python numbers: no host-to-device copy inside the step
        if self.target == 'signed':
            target = torch.stack((delta[..., 0] + (H - 1), delta[..., 1] + (W - 1)), -1)
        elif self.target == 'normalized':
            target = torch.stack((delta[..., 0].abs() / H, delta[..., 1].abs() / W), -1)
        else:
            target = delta.abs()
        if self.mode == 'l1':
            per_pair = (pred.squeeze(-1) - target).abs().sum(-1)  # (B, m): the L1 norm over (u, v)
            if self.reduction == 'mean':
                return per_pair.mean() / 2  # F.l1_loss: mean over B·m·2
        elif self.mode == 'ce':
            logits = pred.permute(0, 3, 1, 2)  # (B, bins, m, 2)
            per_pair = F.cross_entropy(logits, target.long(), reduction='none').sum(-1)
        else:
            prob = pred.softmax(-1)
            idx = torch.arange(prob.shape[-1], device=prob.device, dtype=prob.dtype)
            mu = (prob * idx).sum(-1)
            var = (prob * (idx - mu.unsqueeze(-1)) ** 2).sum(-1) + 1e-8
            per_pair = ((mu - target) ** 2 / var + 0.001 * var.log()).sum(-1)
        return per_pair.mean(1).sum() if self.reduction == 'sum' else per_pair.mean()

    def loss(self, feats: Tuple[Tensor, ...], data_samples: List, trace: Optional[TokenTrace]) -> Dict[str, Tensor]:
        """``{loss_name: λ Σ_maps L_drloc}`` (summed over the maps, as the official multi-scale loss)."""
        maps = self.feature_maps(feats, trace)
        widths = [h.trunk[0].in_features // 2 for h in self.heads]
        mismatch = [(tuple(m.shape), c) for m, c in zip(maps, widths) if m.shape[1] != c]
        if mismatch:
            raise ValueError(f'DRLoc in_channels do not match the feature maps (shape, in_channels): {mismatch}')
        loss = sum(self.pair_loss(h, m, k) for h, m, k in zip(self.heads, maps, self.num_bins))
        return {self.loss_name: self.loss_weight * loss}
