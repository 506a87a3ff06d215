"""Swin Transformer that carries the token trace."""
import copy
from collections import OrderedDict
from typing import Mapping, Optional, Sequence, Tuple

import torch.utils.checkpoint as cp
from mmpretrain.models.backbones import SwinTransformer as MMPretrainSwinTransformer
from mmpretrain.models.utils import resize_pos_embed
from torch import Tensor

from mmvitreg.registry import MODELS
from ..converters import OfficialLayout, converter_tool, register_layout, rename_keys
from ..layers import Ride, WindowAttention, WindowLayout
from ..layers.drop_path import drop_path
from ..trace import TokenTrace, TraceSpec
from .arch import BackboneValueError, check_arch, check_drop_path_rate
from .init_cfg import own_pretrained, unbuilt


@MODELS.register_module()
class SwinTransformer(MMPretrainSwinTransformer):
    """mmpretrain's Swin Transformer with the token trace and fused window attention.

    `Swin Transformer: Hierarchical Vision Transformer using Shifted Windows
    <https://arxiv.org/abs/2103.14030>`_. Built by mmpretrain's own ``__init__`` (every argument,
    the arch zoo ``tiny/small/base/large``, the state-dict keys, the initialisation, the
    position-bias resizing on load, ``frozen_stages``, ``get_layer_depth``), with mmvitreg's
    :class:`~mmvitreg.models.layers.WindowAttention` as the window attention, so mmpretrain Swin
    checkpoints load with no missing or unexpected key and give the same outputs. mmseg's and
    mmdet's Swin share the key layout (``pad_small_map=True`` and ``out_indices=(0, 1, 2, 3)``
    give their behaviour, for UperNet and Cascade Mask R-CNN); official Swin releases go through
    :func:`convert_swin` (``tools/model_converters/swin_to_mmvitreg.py``).

    ``forward(x, trace=None)`` computes what mmpretrain's forward computes (its embedding, stages, patch
    merging and norms, each block's pre-norm shifted-window attention and FFN), block by block with mmpretrain's
    modules, in fewer operators than mmpretrain's ``SwinBlock``: the shifted-window mask is built once per
    input size and device (:meth:`~mmvitreg.models.layers.WindowLayout.attn_mask`, cached; mmpretrain builds it
    in every block's forward), stochastic depth is timm's (:func:`~mmvitreg.models.layers.drop_path.drop_path`),
    the attention the fused one of :class:`~mmvitreg.models.layers.WindowAttention`; no key changes (the same
    outputs as mmpretrain's Swin, tested). mmpretrain's code still runs the patch embedding, the patch merging
    (mmcv's ``PatchMerging``, through ``nn.Unfold``) and the FFN layers. With a
    :class:`~mmvitreg.models.trace.TokenTrace` it calls the trace's recording API (what it offers:
    :attr:`trace_spec`):

    * ``start`` with the ``(B, H/4 * W/4, C)`` patch tokens after the patch embedding (and its norm),
      before the absolute position embedding (56×56 tokens at 224), where a plan mixes them;
    * ``block`` for every block, numbered across stages (``0 .. sum(depths) - 1``, negative from the
      last), with its stage grid and :class:`~mmvitreg.models.layers.WindowLayout` (a stream's values ride
      in the block's windows, padding 0): tapped tokens ``(B, H_s * W_s, C_s)`` before any stage norm,
      tapped window attention maps ``(B * nW, heads, w * w, w * w)`` (after softmax, before attention
      dropout; only these blocks leave the fused kernel);
    * ``downsample`` at every patch merging (the stream's values follow it);
    * ``stage`` with every stage's output after its patch merging (before any norm; the official DRLoc
      ``--use_multiscale`` maps: ``2C@28, 4C@14, 8C@7, 8C@7`` for Swin-T at 224, whatever
      ``out_after_downsample``);
    * ``end`` with the last stage's tokens after its output norm (raw when the last stage is not an output).

    Args:
        **kwargs: The arguments of mmpretrain's ``SwinTransformer`` (``arch``, ``img_size``,
            ``patch_size``, ``window_size``, ``drop_path_rate``, ``out_indices``,
            ``out_after_downsample``, ``use_abs_pos_embed``, ``pad_small_map``, ``stage_cfgs``,
            ...). ``stage_cfgs.block_cfgs.attn_cfgs.window_msa`` is always ``WindowAttention``. Errors start
            with mmpretrain's wording and name the fix
            (:class:`~mmvitreg.models.backbones.arch.BackboneValueError` where mmpretrain asserts).
    """

    def __init__(self, arch='tiny', stage_cfgs=dict(), **kwargs):
        check_drop_path_rate(kwargs.get('drop_path_rate', 0.1))  # mmpretrain's default
        super().__init__(arch=check_arch(arch, self.arch_zoo, ('embed_dims', 'depths', 'num_heads')),
                         stage_cfgs=self._with_window_attention(stage_cfgs), **kwargs)
        self.blocks = [block for stage in self.stages for block in stage.blocks]  # plain list: no new keys
        # what a trace gets: every block (numbered across stages), all services, 'final' and 'stages'
        self.trace_spec = TraceSpec(
            num_blocks=len(self.blocks),
            channels=tuple(stage.embed_dims for stage in self.stages for _ in stage.blocks),
            services={'mix', 'attn', 'stream'}, points={'final', 'stages'}, out_types=('featmap', ),
            out_type='featmap', stage_channels=tuple(stage.out_channels for stage in self.stages),
            out_channels=tuple(self.num_features[i] for i in range(len(self.stages)) if i in self.out_indices),
            patch_stride=self.patch_embed.projection.stride[0])

    @staticmethod
    def _with_window_attention(stage_cfgs):
        """``stage_cfgs`` (one dict, or one per stage) with ``WindowAttention`` in every block."""
        if isinstance(stage_cfgs, Sequence):
            return [SwinTransformer._with_window_attention(cfg) for cfg in stage_cfgs]
        cfg = copy.deepcopy(dict(stage_cfgs))
        block_cfgs = cfg.get('block_cfgs', {})
        if isinstance(block_cfgs, Sequence):
            block_cfgs = [dict(b, attn_cfgs=dict(b.get('attn_cfgs', {}), window_msa=WindowAttention))
                          for b in block_cfgs]
        else:
            block_cfgs = dict(block_cfgs, attn_cfgs=dict(block_cfgs.get('attn_cfgs', {}), window_msa=WindowAttention))
        cfg['block_cfgs'] = block_cfgs
        return cfg

    def init_weights(self):
        """mmpretrain's ``init_weights``, an ``init_cfg=dict(type='Pretrained')`` loaded by ``mmvitreg.Pretrained``."""
        self.init_cfg = own_pretrained(self.init_cfg)
        super().init_weights()

    @property
    def left_out(self) -> Tuple[str, ...]:
        """The stage output norms this configuration does not build: ``norm{i}`` of a stage ``i`` not in
        ``out_indices``, or all with ``norm_cfg=None`` (:func:`~mmvitreg.models.backbones.init_cfg.unbuilt`)."""
        return unbuilt(self, (f'norm{i}' for i in range(self.num_layers)))

    def train(self, mode: bool = True) -> 'SwinTransformer':
        """mmpretrain's ``train`` (keeps frozen stages frozen), returning ``self`` as ``nn.Module`` does."""
        super().train(mode)
        return self

    def window_layout(self, block, grid: Tuple[int, int]) -> WindowLayout:
        """The layout of ``block`` on ``grid``, with mmpretrain's rules for maps as small as a window."""
        window, shift = block.attn.window_size, block.attn.shift_size
        if min(grid) < window and not block.attn.pad_small_map:
            raise BackboneValueError(f'The input shape {tuple(grid)} is smaller than the window size ({window}): '
                                     'set pad_small_map=True (downstream use) or a smaller window_size')
        if min(grid) == window and not block.attn.pad_small_map:
            shift = 0  # the official classification behaviour: no shift when one window covers the map
        return WindowLayout(tuple(grid), window, shift)

    @staticmethod
    def _block(block, layout: WindowLayout, x: Tensor, need_attn: bool = False, ride: Optional[Ride] = None):
        """What mmpretrain's ``SwinBlock`` computes on ``x`` ``(B, H * W, C)`` (pre-norm W-MSA/SW-MSA and FFN,
        both residual, each with its stochastic depth), with its modules: with ``need_attn`` also the window
        attention maps; a ``ride`` holds values in windows."""
        h = layout.partition(block.norm1(x))
        h = block.attn.w_msa(h, mask=layout.attn_mask(x.device), need_attn=need_attn, ride=ride)
        h, attn = h if need_attn else (h, None)
        x = x + drop_path(layout.reverse(h), block.attn.drop)
        h = block.ffn.gamma2(block.ffn.layers(block.norm2(x)))  # mmcv's FFN before its identity and drop path
        x = x + drop_path(h, block.ffn.dropout_layer)
        return (x, attn) if need_attn else x

    def _run(self, block, layout: WindowLayout):
        """``run(x, need_attn, ride)`` of ``block`` on ``layout``: :meth:`_block`, through activation checkpointing
        when the block asks for it (``with_cp``) and no map is returned."""
        def run(x: Tensor, need_attn: bool = False, ride: Optional[Ride] = None):
            if block.with_cp and x.requires_grad and not need_attn:
                return cp.checkpoint(self._block, block, layout, x, False, ride, use_reentrant=False)
            return self._block(block, layout, x, need_attn, ride)
        return run

    def forward(self, x: Tensor, trace: Optional[TokenTrace] = None) -> Tuple[Tensor, ...]:
        """Embed ``x`` ``(B, 3, H, W)`` and run the stages block by block (:meth:`_run`); ``(B, C_i, H_i, W_i)``
        per ``out_indices``."""
        x, hw = self.patch_embed(x)
        if trace is not None:
            x = trace.start(self.trace_spec, x, hw, type(self).__name__)
        if self.use_abs_pos_embed:
            x = x + resize_pos_embed(self.absolute_pos_embed, self.patch_resolution, hw, self.interpolate_mode,
                                     self.num_extra_tokens)
        x = self.drop_after_pos(x)

        outs, index = [], 0
        for i, stage in enumerate(self.stages):
            for block in stage.blocks:
                layout = self.window_layout(block, hw)
                run = self._run(block, layout)
                x = run(x) if trace is None else trace.block(index, run, x, hw, layout)
                index += 1
            if stage.downsample is not None and self.out_after_downsample:
                x, hw = self._downsample(stage, x, hw, trace)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(x)
                outs.append(out.view(-1, *hw, self.num_features[i]).permute(0, 3, 1, 2).contiguous())
            if trace is not None and i == len(self.stages) - 1:
                trace.end(out if i in self.out_indices else x)
            if stage.downsample is not None and not self.out_after_downsample:
                x, hw = self._downsample(stage, x, hw, trace)
            if trace is not None:
                trace.stage(i, x, hw)
        return tuple(outs)

    @staticmethod
    def _downsample(stage, x: Tensor, hw, trace: Optional[TokenTrace]):
        """Patch merging of the tokens (and of a trace's stream)."""
        x, new_hw = stage.downsample(x, hw)
        if trace is not None:
            trace.downsample(hw, new_hw)
        return x, new_hw

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        """mmpretrain's upgrade of version-1/2 Swin checkpoints (``norm.`` -> ``norm{last}.``, no
        ``attn_mask`` buffers), which mmpretrain applies to its own class only."""
        version = local_metadata.get('version', None)
        for key in [k for k in state_dict if k.startswith(prefix)]:
            name = key[len(prefix):]
            if (version is None or version < 2) and name.startswith('norm.'):
                state_dict[f'{prefix}norm{len(self.stages) - 1}.{name[5:]}'] = state_dict.pop(key)
            elif (version is None or version < 3) and 'attn_mask' in name:
                del state_dict[key]
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)


def _unfold_order(x: Tensor) -> Tensor:
    """Reorder the ``4C`` input axis of an official patch-merging weight ``(..., 4C)`` (concatenation
    ``x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2]``) to ``nn.Unfold``'s
    channel-major ``(C, kh, kw)`` order used by mmcv's ``PatchMerging``."""
    *lead, c4 = x.shape
    x = x.reshape(*lead, 4, c4 // 4)[..., [0, 2, 1, 3], :]
    return x.transpose(-1, -2).reshape(*lead, c4)


def convert_swin(state_dict: Mapping[str, Tensor]) -> 'OrderedDict[str, Tensor]':
    """Official Swin release (microsoft/Swin-Transformer) -> mmvitreg / mmpretrain classifier keys.

    ``patch_embed.proj`` -> ``patch_embed.projection``; ``layers.{s}.blocks.{b}.attn.*`` ->
    ``stages.{s}.blocks.{b}.attn.w_msa.*``; ``mlp.fc1/fc2`` -> ``ffn.layers.0.0`` / ``ffn.layers.1``;
    ``layers.{s}.downsample.*`` -> ``stages.{s}.downsample.*`` with the merged-channel order
    converted (:func:`_unfold_order`); ``norm`` -> ``norm{last}``; all under ``backbone.``; ``head``
    -> ``head.fc`` (mmpretrain's ``LinearClsHead``); ``attn_mask`` buffers dropped.

    Raises:
        ValueError: listing every key that matches no rule.
    """
    last = max((int(k.split('.')[1]) for k in state_dict if k.startswith('layers.')), default=0)
    rules = (
        (r'^patch_embed\.proj\.', 'patch_embed.projection.'),
        (r'^patch_embed\.norm\.', 'patch_embed.norm.'),
        (r'^layers\.(\d+)\.blocks\.(\d+)\.attn\.', r'stages.\1.blocks.\2.attn.w_msa.'),
        (r'^layers\.(\d+)\.blocks\.(\d+)\.mlp\.fc1\.', r'stages.\1.blocks.\2.ffn.layers.0.0.'),
        (r'^layers\.(\d+)\.blocks\.(\d+)\.mlp\.fc2\.', r'stages.\1.blocks.\2.ffn.layers.1.'),
        (r'^layers\.(\d+)\.blocks\.(\d+)\.(norm[12])\.', r'stages.\1.blocks.\2.\3.'),
        (r'^layers\.(\d+)\.downsample\.', r'stages.\1.downsample.'),
        (r'^norm\.', f'norm{last}.'),
    )
    out = rename_keys(state_dict, rules, {'head.': 'head.fc.'}, skip=r'(^|\.)attn_mask$')
    for key in out:
        if '.downsample.' in key:
            out[key] = _unfold_order(out[key])
    return out


register_layout(OfficialLayout(
    'official Swin Transformer (microsoft/Swin-Transformer)', convert_swin, converter_tool('swin'),
    "mmvitreg.SwinTransformer with mmpretrain's LinearClsHead",
    frozenset({r'^patch_embed\.proj\.weight$', r'^layers\.\d+\.blocks\.\d+\.attn\.relative_position_'})))
