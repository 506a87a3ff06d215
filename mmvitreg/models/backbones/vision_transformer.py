"""The mmvitreg Vision Transformer: one ViT-family backbone that carries the token trace."""
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmengine.model import ModuleList
from mmengine.model.weight_init import trunc_normal_
from mmpretrain.models.backbones.vision_transformer import TransformerEncoderLayer
from mmpretrain.models.backbones.vision_transformer import VisionTransformer as MMPretrainVisionTransformer
from mmpretrain.models.utils import resize_pos_embed, to_2tuple
from torch import Tensor

from mmvitreg.registry import MODELS
from ..layers import ConvStem, TransformerBlock, token_grid
from ..trace import TokenTrace, TraceSpec, resolve_indices
from .arch import BackboneValueError, check_arch, check_drop_path_rate
from .init_cfg import own_pretrained, unbuilt

ESSENTIAL_ARCH_KEYS = ('embed_dims', 'num_layers', 'num_heads', 'feedforward_channels')
# Optional architecture keys of an arch dict and their defaults (the plain ViT).
ARCH_OPTIONS = dict(attn_types='msa', attn_cfgs=None, stem=None, scale_adjustment=1., skip_lam=1.)
# timm / DeiT / DeepViT / LV-ViT initialisation (the official codes' ``_init_weights``).
TIMM_INIT_CFG = [
    dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
    dict(type='Constant', layer='LayerNorm', val=1., bias=0.),
]


class HostEncoderLayer(TransformerEncoderLayer):
    """mmpretrain's ``TransformerEncoderLayer``, run by its own forward, for a layer given options that
    :class:`~mmvitreg.models.layers.TransformerBlock` does not take (``layer_cfgs``, ``layer_scale_init_value``):
    ``(B, N, C)`` -> ``(B, N, C)``; a trace reads its tokens but taps no attention in it."""

    def __init__(self, with_cp: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.with_cp = with_cp

    def forward(self, x: Tensor, need_attn: bool = False, ride=None) -> Tensor:
        if need_attn or ride is not None:
            raise BackboneValueError('a trace taps the attention of TransformerBlock, not of a layer built from '
                                     'layer_cfgs or layer_scale_init_value: tap other blocks or drop those options')
        if self.with_cp and x.requires_grad:  # reentrant, as mmseg's ViT
            return cp.checkpoint(super().forward, x, use_reentrant=True)
        return super().forward(x)


@MODELS.register_module()
class VisionTransformer(MMPretrainVisionTransformer):
    """ViT-family backbone with per-block attention kinds, conv stems, residual scaling and a token trace.

    `An Image is Worth 16x16 Words <https://arxiv.org/abs/2010.11929>`_, extended with
    `DeepViT <https://arxiv.org/abs/2103.11886>`_ (re-attention, conv stem, ``scale_adjustment``)
    and `LV-ViT <https://arxiv.org/abs/2104.10858>`_ (conv stem, ``skip_lam``); presets in
    :class:`DeepViT` and :class:`LVViT`. Built by mmpretrain's ``VisionTransformer`` constructor (the
    embeddings, ``pre_norm``, the final norms, every option and its checks) asked for no blocks; its blocks are
    :class:`~mmvitreg.models.layers.TransformerBlock` (mmpretrain's keys and module layout, the attention
    through mmvitreg's fused ``attend``), built once, and a conv stem replaces its linear patch embedding. In its
    plain configuration (the default arch options) the state dict, the outputs and the options
    (``out_type``, ``out_indices``, ``final_norm``, ``with_cls_token``, ``frozen_stages``, ``pre_norm``,
    ``patch_cfg``, position-embedding resizing on load and at run time) are those of mmpretrain's
    ``VisionTransformer``, whose methods it inherits: mmpretrain / DeiT checkpoints load unchanged,
    mmpretrain's own ViT tests pass, and it serves mmpretrain heads, mmseg's ``MultiLevelNeck`` +
    UPerHead and mmdet FPNs (``out_type='featmap'``). Errors start with mmpretrain's wording and name
    the fix (:class:`~mmvitreg.models.backbones.arch.BackboneValueError` where mmpretrain asserts).

    ``forward(x, trace=None)``: with a :class:`~mmvitreg.models.trace.TokenTrace` the backbone fills it
    through the trace's recording API: :meth:`~mmvitreg.models.trace.TokenTrace.start` with the
    ``(B, Hg * Wg, C)`` patch tokens right after the patch embedding and **before** the cls token and the
    position embedding (where a plan mixes them), :meth:`~mmvitreg.models.trace.TokenTrace.block` for
    every block (tokens before the final norm; attention maps ``(B, heads, N, N)``, the map that
    multiplies ``V``, taken before attention dropout except in re-attention, whose dropout precedes its
    head transform) and :meth:`~mmvitreg.models.trace.TokenTrace.end` after the final norm. What it
    offers is :attr:`trace_spec`; untapped blocks keep the fused attention kernel. Without a trace it is
    an ordinary backbone.

    Args:
        arch (str | dict): A key of :attr:`arch_zoo` (mmpretrain's ViT/DeiT names here) or a dict with
            ``embed_dims``, ``num_layers``, ``num_heads``, ``feedforward_channels`` and optionally

            - ``attn_types`` (str | Sequence[str | bool]): attention kind of every block, one name
              for all or one per block: ``'msa'``, ``'reattn'``, ``'talking_heads'``; a bool list
              (DeepViT's ``apply_transform``) maps True to ``'reattn'``, False to ``'msa'``.
              Defaults to ``'msa'``.
            - ``attn_cfgs`` (dict): extra arguments per attention kind, e.g.
              ``dict(reattn=dict(transform_scale=True))``. Defaults to None.
            - ``stem`` (dict, optional): None for the linear patch embedding, else the arguments of
              :class:`~mmvitreg.models.layers.ConvStem` (``channels``, ``num_convs``). Defaults to None.
            - ``scale_adjustment`` (float): DeepViT's residual ``a``. Defaults to 1.
            - ``skip_lam`` (float): LV-ViT's residual ``λ``. Defaults to 1.
        img_size (int | tuple): Input size the position embedding is made for. Defaults to 224.
        patch_size (int): Total stride of the patch embedding. Defaults to 16.
        in_channels (int): Image channels. Defaults to 3.
        out_indices (int | Sequence[int]): Blocks whose outputs are returned (negative counts from
            the end). Defaults to -1.
        drop_rate (float): Dropout after the position embedding, the attention projection and in
            the FFN. Defaults to 0.
        attn_drop_rate (float): Attention-map dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth, linearly increased from 0 over the blocks.
            Defaults to 0.
        qkv_bias (bool): Bias of the ``qkv`` projections. Defaults to True.
        norm_cfg (dict): Norm of the blocks and the final norm. Defaults to ``dict(type='LN', eps=1e-6)``.
        final_norm (bool): Norm the output of the last block (key ``ln1``). Defaults to True.
        out_type (str): ``'cls_token'`` ``(B, C)``, ``'featmap'`` ``(B, C, Hg, Wg)``,
            ``'avg_featmap'`` ``(B, C)`` (mean patch token, normed by ``ln2``) or ``'raw'``
            ``(B, N, C)``. Defaults to ``'cls_token'``.
        with_cls_token (bool): Prepend a cls token. Defaults to True.
        frozen_stages (int): Freeze the embeddings and the first ``frozen_stages`` blocks. Defaults to -1.
        interpolate_mode (str): Position-embedding resize mode. Defaults to ``'bicubic'``.
        patch_cfg (dict): Extra arguments of mmpretrain's linear patch embedding (mmcv's ``PatchEmbed``;
            not with a conv stem). Defaults to an empty dict.
        pre_norm (bool): Norm the tokens before the first block (CLIP; the linear patch embedding then has
            no bias), as mmpretrain. Defaults to False.
        with_cp (bool): Activation checkpointing in every block, as mmseg's ViT (recomputed in the backward,
            with or without a trace). Defaults to False.
        layer_scale_init_value (float): mmpretrain's layer scale; not 0 builds every block as
            :class:`HostEncoderLayer`. Defaults to 0.
        layer_cfgs (dict | Sequence[dict]): mmpretrain's per-layer options of ``TransformerEncoderLayer``, one
            dict for all or one per block; a block given any is a :class:`HostEncoderLayer`, run by mmpretrain's
            forward (plain arch options only). Defaults to an empty dict.
        init_cfg (dict | list, optional): Defaults to the timm/DeiT init (truncated normal 0.02 on
            Linear weights, zero biases, LayerNorm 1/0; ``cls_token`` and ``pos_embed`` truncated
            normal 0.02); convolutions and BatchNorms keep PyTorch's init, as in the official codes.

    Attributes:
        patch_stride (int): Input pixels per token side (16 for every preset).
    """

    def __init__(self, arch: Union[str, dict] = 'base', img_size=224, patch_size: int = 16, in_channels: int = 3,
                 out_indices: Union[int, Sequence[int]] = -1, drop_rate: float = 0., attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0., qkv_bias: bool = True, norm_cfg: dict = dict(type='LN', eps=1e-6),
                 final_norm: bool = True, out_type: str = 'cls_token', with_cls_token: bool = True,
                 frozen_stages: int = -1, interpolate_mode: str = 'bicubic', patch_cfg: dict = dict(),
                 pre_norm: bool = False, with_cp: bool = False, layer_scale_init_value: float = 0.,
                 layer_cfgs=dict(), init_cfg=TIMM_INIT_CFG):
        settings = {**ARCH_OPTIONS, **check_arch(arch, self.arch_zoo, ESSENTIAL_ARCH_KEYS, ARCH_OPTIONS)}
        check_drop_path_rate(drop_path_rate)
        num_layers = settings['num_layers']
        out_indices = self._out_indices(out_indices, num_layers)
        # mmpretrain's constructor builds the embeddings, the norms and every option, asked for no blocks (ours,
        # built once below, then frozen once: its freezing walks the blocks)
        super().__init__(
            {**settings, 'num_layers': 0}, img_size, patch_size, in_channels, [], drop_rate=drop_rate,
            drop_path_rate=drop_path_rate, qkv_bias=qkv_bias, norm_cfg=norm_cfg, final_norm=final_norm,
            out_type=out_type, with_cls_token=with_cls_token, frozen_stages=-1, interpolate_mode=interpolate_mode,
            patch_cfg=patch_cfg, pre_norm=pre_norm, init_cfg=init_cfg)
        self.arch_settings, self.num_layers, self.out_indices = settings, num_layers, out_indices
        self.frozen_stages = frozen_stages
        if settings['stem'] is None:
            self.patch_stride = to_2tuple(self.patch_embed.projection.stride)[0]
        elif patch_cfg:
            raise ValueError('patch_cfg configures the linear patch embedding, which a stem replaces: drop patch_cfg '
                             'or the arch\'s stem')
        else:
            self.patch_embed = ConvStem(in_channels, self.embed_dims, patch_size=patch_size, img_size=img_size,
                                        **settings['stem'])
            self.patch_stride = patch_size

        attn_types = self._attn_types(settings['attn_types'])
        attn_cfgs = settings['attn_cfgs'] or {}
        dpr = np.linspace(0, drop_path_rate, num_layers)
        layer_cfgs = [layer_cfgs] * num_layers if isinstance(layer_cfgs, dict) else list(layer_cfgs)
        if layer_scale_init_value:
            layer_cfgs = [dict(dict(layer_scale_init_value=layer_scale_init_value), **cfg) for cfg in layer_cfgs]
        plain = settings['scale_adjustment'] == settings['skip_lam'] == 1 and not attn_cfgs.get('msa')
        if any(cfg and not (plain and kind == 'msa') for cfg, kind in zip(layer_cfgs, attn_types)):
            raise ValueError('layer_cfgs and layer_scale_init_value build mmpretrain\'s plain layers: drop them, or '
                             'the arch\'s attn_types, attn_cfgs, scale_adjustment and skip_lam')
        self.layers = ModuleList(
            HostEncoderLayer(with_cp=with_cp, **{
                **dict(embed_dims=self.embed_dims, num_heads=settings['num_heads'],
                       feedforward_channels=settings['feedforward_channels'], drop_rate=drop_rate,
                       attn_drop_rate=attn_drop_rate, drop_path_rate=float(dpr[i]), qkv_bias=qkv_bias,
                       norm_cfg=norm_cfg),
                **layer_cfgs[i]}) if layer_cfgs[i] else
            TransformerBlock(
                self.embed_dims,
                settings['num_heads'],
                settings['feedforward_channels'],
                attn_type=attn_types[i],
                attn_cfg=attn_cfgs.get(attn_types[i]),
                qkv_bias=qkv_bias,
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                drop_path_rate=float(dpr[i]),
                norm_cfg=norm_cfg,
                scale_adjustment=settings['scale_adjustment'],
                skip_lam=settings['skip_lam'],
                with_cp=with_cp) for i in range(num_layers))
        if frozen_stages > 0:
            self._freeze_stages()

        # what a trace gets: every block, all services, 'embed' and 'final'
        self.trace_spec = TraceSpec(
            num_blocks=num_layers, channels=(self.embed_dims, ) * num_layers,
            num_extra_tokens=self.num_extra_tokens, services={'mix', 'attn', 'stream'}, points={'embed', 'final'},
            facts={'isotropic'} | ({'cls_token'} if with_cls_token else set()),
            out_types=tuple(sorted(self.OUT_TYPES)), out_type=out_type,
            out_channels=tuple(self.embed_dims for i in range(self.num_layers) if i in self.out_indices),
            patch_stride=self.patch_stride)

    @staticmethod
    def _out_indices(out_indices: Union[int, Sequence[int]], num_layers: int) -> list:
        """``out_indices`` as non-negative block indices, by the trace's resolver (negative ones count from the
        last block), with mmpretrain's wording first in its errors."""
        if isinstance(out_indices, int):
            out_indices = [out_indices]
        if not isinstance(out_indices, Sequence):
            raise BackboneValueError(f'"out_indices" must be a sequence or int, get {type(out_indices)} instead: '
                                     'give a block index or a list of them, e.g. -1 or [3, 7, 11]')
        try:
            return list(resolve_indices(out_indices, num_layers))
        except IndexError as error:
            raise BackboneValueError(f'Invalid out_indices {error.index}: the {num_layers} blocks have the indices '
                                     f'0 .. {num_layers - 1} (or {-num_layers} .. -1 from the last)') from None

    def _attn_types(self, spec) -> list:
        if isinstance(spec, str):
            return [spec] * self.num_layers
        if len(spec) != self.num_layers:
            raise ValueError(f'attn_types lists {len(spec)} blocks but the arch has {self.num_layers}')
        return [('reattn' if t else 'msa') if isinstance(t, bool) else t for t in spec]

    @property
    def left_out(self) -> Tuple[str, ...]:
        """The output norms this configuration does not build: ``ln1`` with ``final_norm=False``, ``ln2`` unless
        ``out_type='avg_featmap'`` (:func:`~mmvitreg.models.backbones.init_cfg.unbuilt`)."""
        return unbuilt(self, ('ln1', 'ln2'))

    def token_grid(self, input_size) -> Tuple[int, int]:
        """Token grid ``(Hg, Wg)`` of an input of ``input_size`` (int or ``(H, W)``)."""
        return token_grid(input_size, self.patch_stride)

    def train(self, mode: bool = True):
        """Set the mode, keep frozen stages in eval mode and return the module (as ``nn.Module.train``)."""
        super().train(mode)
        if mode and self.frozen_stages > 0:
            self._freeze_stages()
        return self

    def init_weights(self):
        self.init_cfg = own_pretrained(self.init_cfg)
        super().init_weights()
        pretrained = isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained'
        if not pretrained and self.cls_token is not None:
            trunc_normal_(self.cls_token, std=.02)

    def forward(self, x: Tensor, trace: Optional[TokenTrace] = None) -> Tuple[Tensor, ...]:
        """Embed ``x`` ``(B, in_channels, H, W)`` and run the blocks; outputs per ``out_indices``.

        Inputs are padded bottom/right to a multiple of :attr:`patch_stride`.
        """
        x, hw = self._embed(x)
        if trace is not None:
            x = trace.start(self.trace_spec, x, hw, type(self).__name__)
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + resize_pos_embed(
            self.pos_embed, self.patch_resolution, hw, mode=self.interpolate_mode,
            num_extra_tokens=self.num_extra_tokens)
        x = self.pre_norm(self.drop_after_pos(x))

        outs = []
        for i, layer in enumerate(self.layers):
            x = layer(x) if trace is None else trace.block(i, layer, x, hw)
            if i == self.num_layers - 1:
                x = self.ln1(x) if self.final_norm else x
                if trace is not None:
                    trace.end(x)
            if i in self.out_indices:
                outs.append(self._format_output(x, hw))
        return tuple(outs)

    def _embed(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        """Patch tokens ``(B, Hg * Wg, C)`` of ``x`` ``(B, in_channels, H, W)`` padded bottom/right to the
        patch stride, and the grid ``(Hg, Wg)``."""
        if not isinstance(self.patch_embed, ConvStem):
            return self.patch_embed(x)  # mmpretrain's (mmcv's ``PatchEmbed``, corner padding)
        s = self.patch_stride
        x = self.patch_embed(F.pad(x, (0, -x.shape[-1] % s, 0, -x.shape[-2] % s)))
        return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])
