"""The mmvitreg Vision Transformer: one ViT-family backbone that carries the token trace."""

from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.utils.checkpoint as cp
from mmengine.model import ModuleList
from mmengine.model.weight_init import trunc_normal_
from mmpretrain.models.backbones.vision_transformer import TransformerEncoderLayer
from mmpretrain.models.backbones.vision_transformer import VisionTransformer as MMPretrainVisionTransformer
from mmpretrain.models.utils import resize_pos_embed, to_2tuple
from torch import Tensor

from mmvitreg.registry import MODELS

from ..layers import ConvStem, TransformerBlock
from ..trace import TokenTrace, TraceSpec, resolve_indices
from .arch import BackboneValueError, check_arch, check_drop_path_rate
from .init_cfg import own_pretrained, unbuilt

ESSENTIAL_ARCH_KEYS = ('embed_dims', 'num_layers', 'num_heads', 'feedforward_channels')
# Optional architecture keys of an arch dict and their defaults (the plain ViT).
ARCH_OPTIONS = dict(attn_types='msa', attn_cfgs=None, stem=None, scale_adjustment=1.0, skip_lam=1.0)
# timm / DeiT / DeepViT / LV-ViT initialisation (the official codes' ``_init_weights``).
TIMM_INIT_CFG = [
    dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
    dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0),
]


class HostEncoderLayer(TransformerEncoderLayer):
    """mmpretrain's ``TransformerEncoderLayer`` for a block given ``layer_cfgs`` or ``layer_scale_init_value``,
    run by its own forward: ``(B, N, C)`` -> ``(B, N, C)``; a trace reads its tokens but taps no attention.
    ``with_cp`` is set by :class:`VisionTransformer`."""

    with_cp = False

    def forward(self, x: Tensor, need_attn: bool = False, ride=None) -> Tensor:
        if need_attn or ride is not None:
            raise BackboneValueError(
                'a trace taps the attention of TransformerBlock, not of a layer built from '
                'layer_cfgs or layer_scale_init_value: tap other blocks or drop those options'
            )
        if self.with_cp and x.requires_grad:  # reentrant, as mmseg's ViT
            return cp.checkpoint(super().forward, x, use_reentrant=True)
        return super().forward(x)


@MODELS.register_module()
class VisionTransformer(MMPretrainVisionTransformer):
    """ViT-family backbone with per-block attention kinds, conv stems, residual scaling and a token trace.

    `An Image is Worth 16x16 Words <https://arxiv.org/abs/2010.11929>`_, extended with `DeepViT
    <https://arxiv.org/abs/2103.11886>`_ and `LV-ViT <https://arxiv.org/abs/2104.10858>`_ (presets in
    :class:`DeepViT` and :class:`LVViT`). mmpretrain's constructor builds the embeddings, norms and options,
    asked for no blocks; the blocks are :class:`~mmvitreg.models.layers.TransformerBlock` (mmpretrain's keys).
    With the default arch options the state dict, outputs and options are mmpretrain's.

    ``forward(x, trace=None)``: with a :class:`~mmvitreg.models.trace.TokenTrace` it calls ``trace.start`` with
    the ``(B, Hg * Wg, C)`` patch tokens before the cls token and the position embedding, ``trace.block`` for
    every block (tokens before the final norm; maps ``(B, heads, N, N)``) and ``trace.end`` after the final norm;
    what it offers is :attr:`trace_spec`.

    Args:
        arch (str | dict): A key of :attr:`arch_zoo` or a dict with ``embed_dims``, ``num_layers``,
            ``num_heads``, ``feedforward_channels`` and optionally

            - ``attn_types`` (str | Sequence[str | bool]): the attention of every block, one for all or one per
              block: ``'msa'``, ``'reattn'``, ``'talking_heads'``; a bool list (DeepViT's ``apply_transform``)
              maps True to ``'reattn'``. Defaults to ``'msa'``.
            - ``attn_cfgs`` (dict): extra arguments per attention kind, e.g.
              ``dict(reattn=dict(transform_scale=True))``. Defaults to None.
            - ``stem`` (dict, optional): the arguments of :class:`~mmvitreg.models.layers.ConvStem`, None for
              the linear patch embedding. Defaults to None.
            - ``scale_adjustment`` (float): DeepViT's residual ``a``. Defaults to 1.
            - ``skip_lam`` (float): LV-ViT's residual ``λ``. Defaults to 1.
        attn_drop_rate (float): Attention-map dropout. Defaults to 0.
        with_cp (bool): Activation checkpointing in every block, as mmseg's ViT. Defaults to False.
        layer_scale_init_value (float), layer_cfgs (dict | Sequence[dict]): mmpretrain's; a block given either is
            a :class:`HostEncoderLayer`, run by mmpretrain's forward (plain arch options only).
        init_cfg (dict | list, optional): Defaults to the timm/DeiT init (also ``cls_token``).
        **kwargs: The other arguments of mmpretrain's ``VisionTransformer``.

    Attributes:
        patch_stride (int): Input pixels per token side.
    """

    def __init__(
        self,
        arch: Union[str, dict] = 'base',
        img_size=224,
        patch_size: int = 16,
        in_channels: int = 3,
        out_indices: Union[int, Sequence[int]] = -1,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        qkv_bias: bool = True,
        norm_cfg: dict = dict(type='LN', eps=1e-6),
        frozen_stages: int = -1,
        patch_cfg: dict = dict(),
        with_cp: bool = False,
        layer_scale_init_value: float = 0.0,
        layer_cfgs=dict(),
        init_cfg=TIMM_INIT_CFG,
        **kwargs,
    ):
        settings = {**ARCH_OPTIONS, **check_arch(arch, self.arch_zoo, ESSENTIAL_ARCH_KEYS, ARCH_OPTIONS)}
        check_drop_path_rate(drop_path_rate)
        num_layers = settings['num_layers']
        out_indices = self._out_indices(out_indices, num_layers)
        # no blocks from mmpretrain: ours are built once below, then frozen (its freezing walks the blocks)
        super().__init__(
            {**settings, 'num_layers': 0},
            img_size,
            patch_size,
            in_channels,
            [],
            drop_rate=drop_rate,
            qkv_bias=qkv_bias,
            norm_cfg=norm_cfg,
            patch_cfg=patch_cfg,
            init_cfg=init_cfg,
            **kwargs,
        )
        self.arch_settings, self.num_layers, self.out_indices = settings, num_layers, out_indices
        self.frozen_stages = frozen_stages
        if settings['stem'] is None:
            self.patch_stride = to_2tuple(self.patch_embed.projection.stride)[0]
        elif patch_cfg:
            raise ValueError(
                'patch_cfg configures the linear patch embedding, which a stem replaces: drop patch_cfg '
                'or the arch\'s stem'
            )
        else:
            self.patch_embed = ConvStem(
                in_channels, self.embed_dims, patch_size=patch_size, img_size=img_size, **settings['stem']
            )
            self.patch_stride = patch_size

        attn_types = self._attn_types(settings['attn_types'])
        attn_cfgs = settings['attn_cfgs'] or {}
        layer_cfgs = [layer_cfgs] * num_layers if isinstance(layer_cfgs, dict) else list(layer_cfgs)
        if layer_scale_init_value:
            layer_cfgs = [dict(dict(layer_scale_init_value=layer_scale_init_value), **cfg) for cfg in layer_cfgs]
        plain = settings['scale_adjustment'] == settings['skip_lam'] == 1 and not attn_cfgs.get('msa')
        if any(cfg and not (plain and kind == 'msa') for cfg, kind in zip(layer_cfgs, attn_types)):
            raise ValueError(
                'layer_cfgs and layer_scale_init_value build mmpretrain\'s plain layers: drop them, or '
                'the arch\'s attn_types, attn_cfgs, scale_adjustment and skip_lam'
            )
        self.layers = ModuleList()
        for i, dpr in enumerate(np.linspace(0, drop_path_rate, num_layers)):
            cfg = dict(
                embed_dims=self.embed_dims,
                num_heads=settings['num_heads'],
                drop_path_rate=float(dpr),
                feedforward_channels=settings['feedforward_channels'],
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                qkv_bias=qkv_bias,
                norm_cfg=norm_cfg,
            )
            self.layers.append(
                HostEncoderLayer(**{**cfg, **layer_cfgs[i]})
                if layer_cfgs[i]
                else TransformerBlock(
                    **cfg,
                    attn_type=attn_types[i],
                    attn_cfg=attn_cfgs.get(attn_types[i]),
                    scale_adjustment=settings['scale_adjustment'],
                    skip_lam=settings['skip_lam'],
                )
            )
            self.layers[-1].with_cp = with_cp
        if frozen_stages > 0:
            self._freeze_stages()

        # what a trace gets: every block, all services, 'embed' and 'final'
        self.trace_spec = TraceSpec(
            num_blocks=num_layers,
            channels=(self.embed_dims,) * num_layers,
            num_extra_tokens=self.num_extra_tokens,
            services={'mix', 'attn', 'stream'},
            points={'embed', 'final'},
            facts={'isotropic'} | ({'cls_token'} if self.with_cls_token else set()),
            out_types=tuple(sorted(self.OUT_TYPES)),
            out_type=self.out_type,
            out_channels=tuple(self.embed_dims for i in range(self.num_layers) if i in self.out_indices),
            patch_stride=self.patch_stride,
        )

    @staticmethod
    def _out_indices(out_indices: Union[int, Sequence[int]], num_layers: int) -> list:
        """``out_indices`` as non-negative block indices, with mmpretrain's wording first in its errors."""
        if isinstance(out_indices, int):
            out_indices = [out_indices]
        if not isinstance(out_indices, Sequence):
            raise BackboneValueError(
                f'"out_indices" must be a sequence or int, get {type(out_indices)} instead: '
                'give a block index or a list of them, e.g. -1 or [3, 7, 11]'
            )
        try:
            return list(resolve_indices(out_indices, num_layers))
        except IndexError as error:
            raise BackboneValueError(
                f'Invalid out_indices {error.index}: the {num_layers} blocks have the indices '
                f'0 .. {num_layers - 1} (or {-num_layers} .. -1 from the last)'
            ) from None

    def _attn_types(self, spec) -> list:
        if isinstance(spec, str):
            return [spec] * self.num_layers
        if len(spec) != self.num_layers:
            raise ValueError(f'attn_types lists {len(spec)} blocks but the arch has {self.num_layers}')
        return [('reattn' if t else 'msa') if isinstance(t, bool) else t for t in spec]

    @property
    def left_out(self) -> Tuple[str, ...]:
        """The output norms not built (:func:`~mmvitreg.models.backbones.init_cfg.unbuilt`)."""
        return unbuilt(self, ('ln1', 'ln2'))

    def train(self, mode: bool = True):
        """Set the mode, keeping frozen stages in eval mode."""
        super().train(mode)
        if mode and self.frozen_stages > 0:
            self._freeze_stages()
        return self

    def init_weights(self):
        self.init_cfg = own_pretrained(self.init_cfg)
        super().init_weights()
        pretrained = isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained'
        if not pretrained and self.cls_token is not None:
            trunc_normal_(self.cls_token, std=0.02)

    def forward(self, x: Tensor, trace: Optional[TokenTrace] = None) -> Tuple[Tensor, ...]:
        """Embed ``x`` ``(B, in_channels, H, W)`` and run the blocks; outputs per ``out_indices``."""
        x, hw = self.patch_embed(x)
        if trace is not None:
            x = trace.start(self.trace_spec, x, hw, type(self).__name__)
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + resize_pos_embed(
            self.pos_embed,
            self.patch_resolution,
            hw,
            mode=self.interpolate_mode,
            num_extra_tokens=self.num_extra_tokens,
        )
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
