"""Swin Transformer that carries the token trace."""
import copy
from collections import OrderedDict
from typing import Mapping, Optional, Sequence, Tuple

import torch
import torch.utils.checkpoint as cp
from mmpretrain.models.backbones import SwinTransformer as MMPretrainSwinTransformer
from mmpretrain.models.utils import resize_pos_embed
from torch import Tensor

from mmvitreg.registry import MODELS
from ..converters import rename_keys
from ..layers import Ride, WindowAttention, WindowLayout
from ..trace import TokenTrace


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

    ``forward(x, trace=None)``: without a trace the outputs are mmpretrain's (fused
    ``scaled_dot_product_attention`` in every block). With a :class:`~mmvitreg.models.trace.TokenTrace`:

    * ``trace.mix`` mixes the ``(B, H/4 * W/4, C)`` patch tokens after the patch embedding (and its
      norm), before the absolute position embedding (56×56 tokens at 224), unless the plan already
      mixed the images in pixel space (``trace.mix.in_pixels``);
    * blocks are numbered across stages (``0 .. sum(depths) - 1``, negative from the last);
      ``trace.grids[i]`` is block ``i``'s stage grid and ``trace.windows[i]`` its
      :class:`~mmvitreg.models.layers.WindowLayout` (padding, cyclic shift, partition), for every block;
    * ``trace.tokens[i]`` ``(B, H_s * W_s, C_s)``: block ``i``'s output, before any stage norm;
    * ``trace.final``: the last stage's tokens after its output norm (raw when the last stage is not
      an output);
    * ``trace.stages[s]`` ``(B, H_s * W_s, C_s)``: stage ``s``'s output after its patch merging (before
      any norm; the official DRLoc ``--use_multiscale`` maps: ``2C@28, 4C@14, 8C@7, 8C@7`` for Swin-T
      at 224, whatever ``out_after_downsample``), ``trace.stage_grids[s]`` its grid;
    * ``trace.attn[i]`` ``(B * nW, heads, w * w, w * w)``: block ``i``'s window attention maps
      (after softmax, before attention dropout); only these blocks leave the fused kernel.
    * ``trace.stream``: its values are partitioned into every block's windows (padding carries 0) and
      go with the fused attention (:class:`~mmvitreg.models.layers.Ride`); ``stream.resize`` follows
      patch merging; ``trace.streamed[i]`` ``(B, H_s * W_s, D)`` after block ``i``.

    Args:
        **kwargs: The arguments of mmpretrain's ``SwinTransformer`` (``arch``, ``img_size``,
            ``patch_size``, ``window_size``, ``drop_path_rate``, ``out_indices``,
            ``out_after_downsample``, ``use_abs_pos_embed``, ``pad_small_map``, ``stage_cfgs``,
            ...). ``stage_cfgs.block_cfgs.attn_cfgs.window_msa`` is always ``WindowAttention``.
    """

    accepts_trace = True
    trace_serves = frozenset({'grid', 'mix', 'tokens', 'attn', 'windows', 'stream', 'final', 'stages'})

    def __init__(self, stage_cfgs=dict(), **kwargs):
        super().__init__(stage_cfgs=self._with_window_attention(stage_cfgs), **kwargs)
        self.blocks = [block for stage in self.stages for block in stage.blocks]  # plain list: no new keys
        self.num_trace_layers = len(self.blocks)
        self.trace_channels = tuple(stage.embed_dims for stage in self.stages for _ in stage.blocks)

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

    def train(self, mode: bool = True) -> 'SwinTransformer':
        """mmpretrain's ``train`` (keeps frozen stages frozen), returning ``self`` as ``nn.Module`` does."""
        super().train(mode)
        return self

    def window_layout(self, block, grid: Tuple[int, int]) -> WindowLayout:
        """The layout of ``block`` on ``grid``, with mmpretrain's rules for maps as small as a window."""
        window, shift = block.attn.window_size, block.attn.shift_size
        if min(grid) < window and not block.attn.pad_small_map:
            raise ValueError(f'the {grid} token grid is smaller than the {window}x{window} window: set '
                             'pad_small_map=True (downstream use) or a smaller window_size')
        if min(grid) == window and not block.attn.pad_small_map:
            shift = 0  # the official classification behaviour: no shift when one window covers the map
        return WindowLayout(tuple(grid), window, shift)

    @staticmethod
    def _block(block, x: Tensor, layout: WindowLayout, need_attn: bool, ride: Optional[Ride] = None):
        """One Swin block (pre-norm W-MSA/SW-MSA and FFN, both residual) on ``x`` ``(B, H * W, C)``; a
        ``ride`` holds values in windows."""
        h = layout.partition(block.norm1(x))
        h = block.attn.w_msa(h, mask=layout.attn_mask(x.device), need_attn=need_attn, ride=ride)
        h, attn = h if need_attn else (h, None)
        x = x + block.attn.drop(layout.reverse(h))
        return block.ffn(block.norm2(x), identity=x), attn

    @staticmethod
    def _downsample(stage, x: Tensor, hw, stream, values: Optional[Tensor]):
        """Patch merging of the tokens and, when a stream rides along, of its values."""
        x, new_hw = stage.downsample(x, hw)
        if stream is not None:
            values = stream.resize(values, tuple(hw), tuple(new_hw))
        return x, new_hw, values

    def forward(self, x: Tensor, trace: Optional[TokenTrace] = None) -> Tuple[Tensor, ...]:
        """Embed ``x`` ``(B, 3, H, W)`` and run the stages; ``(B, C_i, H_i, W_i)`` per ``out_indices``."""
        x, hw = self.patch_embed(x)
        token_layers = attn_layers = ()
        if trace is not None:
            trace.grid, trace.num_extra_tokens, trace.num_layers = tuple(hw), 0, self.num_trace_layers
            token_layers = TokenTrace.resolve(trace.token_layers, self.num_trace_layers)
            attn_layers = TokenTrace.resolve(trace.attn_layers, self.num_trace_layers)
            if trace.mix is not None and not trace.mix.in_pixels:
                x = trace.mix.mix_tokens(x, hw)
        if self.use_abs_pos_embed:
            x = x + resize_pos_embed(self.absolute_pos_embed, self.patch_resolution, hw, self.interpolate_mode,
                                     self.num_extra_tokens)
        x = self.drop_after_pos(x)

        stream = trace.stream if trace is not None else None
        values = stream.start(trace) if stream is not None else None
        outs, index = [], 0
        for i, stage in enumerate(self.stages):
            for block in stage.blocks:
                layout = self.window_layout(block, hw)
                need_attn = index in attn_layers
                ride = Ride(layout.partition(values)) if stream is not None else None  # padding: values 0
                if block.with_cp and x.requires_grad and not need_attn:
                    x, attn = cp.checkpoint(self._block, block, x, layout, False, ride, use_reentrant=False)
                else:
                    x, attn = self._block(block, x, layout, need_attn, ride)
                if trace is not None:
                    trace.grids[index], trace.windows[index] = tuple(hw), layout
                    if index in token_layers:
                        trace.tokens[index] = x
                    if need_attn:
                        trace.attn[index] = attn
                    if stream is not None:
                        values = stream.step(trace, index, values, layout.reverse(ride.mixed))
                        trace.streamed[index] = values
                index += 1
            if stage.downsample is not None and self.out_after_downsample:
                x, hw, values = self._downsample(stage, x, hw, stream, values)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(x)
                outs.append(out.view(-1, *hw, self.num_features[i]).permute(0, 3, 1, 2).contiguous())
            if trace is not None and i == len(self.stages) - 1:
                trace.final = out if i in self.out_indices else x
            if stage.downsample is not None and not self.out_after_downsample:
                x, hw, values = self._downsample(stage, x, hw, stream, values)
            if trace is not None:
                trace.stages[i], trace.stage_grids[i] = x, tuple(hw)
        return tuple(outs)

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
