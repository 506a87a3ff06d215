"""CvT: the Convolutional vision Transformer (Wu et al. 2021), with the token trace of its last stage."""

from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import trunc_normal_
from mmpretrain.models.backbones.base_backbone import BaseBackbone
from mmpretrain.models.utils import QuickGELU
from torch import Tensor, nn

from mmvitreg.registry import MODELS

from ..trace import TokenTrace, TraceSpec
from .arch import check_arch, check_drop_path_rate
from .init_cfg import own_pretrained


class ConvProjection(nn.Sequential):
    """Depth-wise ``k x k`` conv (no bias) + BatchNorm: the ``dw_bn`` projection of CvT's attention.

    ``(B, C, H, W)`` -> ``(B, H' * W', C)``."""

    def __init__(self, channels: int, kernel_size: int, stride: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, stride, kernel_size // 2, groups=channels, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x).flatten(2).transpose(1, 2)


class ConvAttention(BaseModule):
    """Convolutional projection attention (CvT §3.2): queries from a stride-1, keys and values from a
    stride-``kv_stride`` 3x3 depth-wise conv + BN of the token map, then the linear projections (with bias) and
    multi-head attention by ``F.scaled_dot_product_attention`` (no trace taps this map), without dropout, as the
    official CvT models. The cls token (if any) skips the convolutions. The official code scales the logits by
    ``dim ** -0.5`` (the whole width, not the head width); so does this one.

    Shapes: ``(B, E + H * W, C)`` in and out, ``E`` extra (cls) tokens.
    """

    def __init__(self, dims: int, num_heads: int, kv_stride: int):
        super().__init__()
        self.num_heads, self.scale = num_heads, dims**-0.5
        self.conv_proj_q = ConvProjection(dims, 3, 1)
        self.conv_proj_k = ConvProjection(dims, 3, kv_stride)
        self.conv_proj_v = ConvProjection(dims, 3, kv_stride)
        self.proj_q, self.proj_k, self.proj_v = (nn.Linear(dims, dims) for _ in range(3))
        self.proj = nn.Linear(dims, dims)

    def forward(self, x: Tensor, hw: Tuple[int, int], num_extra: int) -> Tensor:
        extra, tokens = x[:, :num_extra], x[:, num_extra:]
        fmap = tokens.transpose(1, 2).reshape(x.shape[0], x.shape[2], *hw)
        heads = lambda t: t.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)  # noqa: E731
        convs, linears = (self.conv_proj_q, self.conv_proj_k, self.conv_proj_v), (self.proj_q, self.proj_k, self.proj_v)
        q, k, v = (heads(linear(torch.cat((extra, conv(fmap)), dim=1))) for conv, linear in zip(convs, linears))
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        return self.proj(out.transpose(1, 2).flatten(2))


class CvTBlock(BaseModule):
    """Pre-norm block: ``x + DropPath(ConvAttention(LN(x)))``, then ``x + DropPath(MLP(LN(x)))``."""

    def __init__(self, dims: int, num_heads: int, mlp_ratio: float, drop_path: float, kv_stride: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dims)
        self.attn = ConvAttention(dims, num_heads, kv_stride)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dims)
        hidden = int(dims * mlp_ratio)
        self.mlp = nn.Sequential(OrderedDict(fc1=nn.Linear(dims, hidden), act=QuickGELU(), fc2=nn.Linear(hidden, dims)))

    def forward(self, x: Tensor, hw: Tuple[int, int], num_extra: int) -> Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), hw, num_extra))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ConvEmbed(BaseModule):
    """Convolutional token embedding (CvT §3.1): a strided conv, then LayerNorm over channels.

    ``(B, C_in, H, W)`` -> ``(B, H' * W', C)`` and ``(H', W')``."""

    def __init__(self, in_channels: int, dims: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, dims, kernel_size, stride, padding)
        self.norm = nn.LayerNorm(dims)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        x = self.proj(x)
        return self.norm(x.flatten(2).transpose(1, 2)), tuple(x.shape[-2:])


class CvTStage(BaseModule):
    """One stage: token embedding (kernel, stride, padding), an optional cls token, one block per drop path."""

    def __init__(
        self,
        in_channels: int,
        dims: int,
        num_heads: int,
        embed: Tuple[int, int, int],
        cls_token: bool,
        drop_paths: Sequence[float],
        mlp_ratio: float,
        kv_stride: int,
    ):
        super().__init__()
        self.patch_embed = ConvEmbed(in_channels, dims, *embed)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dims)) if cls_token else None
        self.blocks = ModuleList(CvTBlock(dims, num_heads, mlp_ratio, dp, kv_stride) for dp in drop_paths)

    @property
    def num_extra_tokens(self) -> int:
        return int(self.cls_token is not None)


@MODELS.register_module()
class CvT(BaseBackbone):
    """CvT: Introducing Convolutions to Vision Transformers.

    `Wu et al., ICCV 2021 <https://arxiv.org/abs/2103.15808>`_. Three stages, each a convolutional token
    embedding (conv + LayerNorm) followed by pre-norm blocks whose attention projects queries, keys and values
    through depth-wise conv + BN (keys / values at stride 2); no position embedding; a cls token only in the last
    stage, whose LayerNorm-ed output feeds the classifier. Presets follow the paper's Table 2 and the official
    ``microsoft/CvT`` ``experiments/imagenet/cvt/cvt-*.yaml`` (QuickGELU, LayerNorm eps 1e-5, trunc_normal 0.02
    init; ``lib/models/cls_cvt.py`` for the layer order): :attr:`arch_zoo`.

    Module names inside a stage are the official model's (``patch_embed.proj``,
    ``blocks.{j}.attn.conv_proj_q.conv`` / ``.bn``, ``proj_q``, ``mlp.fc1``, ``norm``); the official
    ``stage{i}.`` prefix is ``stages.{i}.`` here.

    DRLoc (Liu et al. 2021) reads the last stage's token map (14x14 at 224) through the token trace (the
    last-stage blocks, the cls token first), so one forward feeds both the cls-token head and the map. Blocks of
    earlier stages are not traced (their token layout has no cls token).

    Args:
        arch (str | dict): ``'13'``, ``'21'``, ``'w24'`` or a dict with ``embed_dims``, ``depths``,
            ``num_heads``. Defaults to '13'.
        in_channels (int): Input channels. Defaults to 3.
        embed_kernels / embed_strides / embed_paddings (Sequence[int]): Token-embedding convs per stage.
            Defaults to (7, 3, 3) / (4, 2, 2) / (2, 1, 1) (official).
        kv_stride (int): Stride of the key / value projections. Defaults to 2.
        mlp_ratio (float): Defaults to 4.
        drop_path_rate (float): Stochastic depth of the last stage, linear from 0 over its blocks (the
            official DROP_PATH_RATE is per stage: 0, 0, 0.1). Defaults to 0.1.
        out_type (str): ``'cls_token'`` (the normed cls token ``(B, C)``, official), ``'featmap'`` (the last
            stage's raw map ``(B, C, H, W)``) or ``'avg_featmap'``. Defaults to 'cls_token'.
        frozen_stages (int): Stages to freeze (-1: none). Defaults to -1.
        init_cfg (dict, optional): Defaults to trunc_normal 0.02 on Linear layers.
    """

    arch_zoo = {
        '13': dict(embed_dims=(64, 192, 384), depths=(1, 2, 10), num_heads=(1, 3, 6)),
        '21': dict(embed_dims=(64, 192, 384), depths=(1, 4, 16), num_heads=(1, 3, 6)),
        'w24': dict(embed_dims=(192, 768, 1024), depths=(2, 2, 20), num_heads=(3, 12, 16)),
    }
    OUT_TYPES = ('cls_token', 'featmap', 'avg_featmap')

    def __init__(
        self,
        arch: Union[str, dict] = '13',
        in_channels: int = 3,
        embed_kernels: Sequence[int] = (7, 3, 3),
        embed_strides: Sequence[int] = (4, 2, 2),
        embed_paddings: Sequence[int] = (2, 1, 1),
        kv_stride: int = 2,
        mlp_ratio: float = 4.0,
        drop_path_rate: float = 0.1,
        out_type: str = 'cls_token',
        frozen_stages: int = -1,
        init_cfg: Optional[dict] = dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
    ):
        super().__init__(init_cfg=init_cfg)
        arch = check_arch(arch, self.arch_zoo, ('embed_dims', 'depths', 'num_heads'))
        if out_type not in self.OUT_TYPES:
            raise ValueError(f'unsupported CvT out_type {out_type!r}; choose from {self.OUT_TYPES}')
        check_drop_path_rate(drop_path_rate)
        dims, depths, heads = arch['embed_dims'], arch['depths'], arch['num_heads']
        embeds = list(zip(embed_kernels, embed_strides, embed_paddings))
        if len({len(v) for v in (dims, depths, heads, embed_kernels, embed_strides, embed_paddings)}) > 1:
            raise ValueError(
                'CvT embed_dims, depths, num_heads and embed_kernels / strides / paddings need one entry '
                'per stage: give each as many entries as the arch has stages'
            )
        self.out_type, self.frozen_stages = out_type, frozen_stages
        self.embed_dims = dims[-1]
        self.stages = ModuleList()
        for i, (d, depth, h, embed) in enumerate(zip(dims, depths, heads, embeds)):
            last = i == len(dims) - 1  # only the last stage has a cls token and stochastic depth
            dpr = torch.linspace(0, drop_path_rate, depth).tolist() if last else [0.0] * depth
            self.stages.append(
                CvTStage(dims[i - 1] if i else in_channels, d, h, embed, last, dpr, mlp_ratio, kv_stride)
            )
        self.norm = nn.LayerNorm(self.embed_dims)
        # what a trace gets: the tokens of the last stage's blocks (earlier stages have no cls token)
        num_blocks = sum(depths)
        self.trace_spec = TraceSpec(
            num_blocks=num_blocks,
            channels=tuple(d for d, n in zip(dims, depths) for _ in range(n)),
            tappable=tuple(range(num_blocks - depths[-1], num_blocks)),
            num_extra_tokens=1,
            facts={'cls_token'},
            out_types=self.OUT_TYPES,
            out_type=out_type,
            out_channels=(self.embed_dims,),
        )
        self._freeze_stages()

    def init_weights(self):
        self.init_cfg = own_pretrained(self.init_cfg)
        super().init_weights()
        if not (isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained'):
            trunc_normal_(self.stages[-1].cls_token, std=0.02)

    def _freeze_stages(self):
        for stage in list(self.stages)[: self.frozen_stages + 1]:
            stage.eval()
            for p in stage.parameters():
                p.requires_grad = False

    def train(self, mode: bool = True) -> 'CvT':
        super().train(mode)
        self._freeze_stages()
        return self

    def forward(self, x: Tensor, trace: Optional[TokenTrace] = None) -> Tuple[Tensor]:
        """``(B, 3, H, W)`` -> a 1-tuple per :attr:`out_type` (``(B, C)`` or ``(B, C, H/16, W/16)``)."""
        index = 0
        for i, stage in enumerate(self.stages):
            x, hw = stage.patch_embed(x)
            if trace is not None and i == 0:
                x = trace.start(self.trace_spec, x, hw, type(self).__name__)
            if stage.cls_token is not None:
                x = torch.cat((stage.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
            for block in stage.blocks:
                if trace is None:
                    x = block(x, hw, stage.num_extra_tokens)
                else:
                    x = trace.block(index, lambda x, need_attn, ride: block(x, hw, stage.num_extra_tokens), x, hw)
                index += 1
            cls, tokens = x[:, : stage.num_extra_tokens], x[:, stage.num_extra_tokens :]
            x = tokens.transpose(1, 2).reshape(x.shape[0], -1, *hw)
        if self.out_type == 'featmap':
            return (x,)
        return (self.norm(tokens).mean(1) if self.out_type == 'avg_featmap' else self.norm(cls[:, 0]),)
