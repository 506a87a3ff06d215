"""Swin Transformer that carries the token trace."""

from collections import OrderedDict
from typing import Mapping, Optional, Sequence, Tuple

from mmpretrain.models.backbones import SwinTransformer as MMPretrainSwinTransformer
from mmpretrain.models.backbones.swin_transformer import SwinBlock as MMPretrainSwinBlock
from mmpretrain.models.backbones.swin_transformer import SwinBlockSequence
from mmpretrain.models.utils import ShiftWindowMSA, WindowMSA, resize_pos_embed
from torch import Tensor

from mmvitreg.registry import MODELS

from ..converters import OfficialLayout, converter_tool, register_layout, rename_keys
from ..layers import Ride, WindowAttention, WindowLayout
from ..layers.drop_path import FFN, drop_path
from ..layers.transformer_block import run_block
from ..trace import TokenTrace, TraceSpec
from .arch import BackboneValueError, check_arch, check_drop_path_rate
from .init_cfg import own_pretrained, unbuilt


class ShiftWindowAttention(ShiftWindowMSA):
    """mmpretrain's ``ShiftWindowMSA`` (its arguments, keys and modules) that places the tokens by a
    :class:`~mmvitreg.models.layers.WindowLayout` (its shift mask built once per input size and device, not in
    every forward) and applies its ``drop`` by :func:`~mmvitreg.models.layers.drop_path.drop_path`.

    ``forward(query, hw_shape, need_attn=False, ride=None)``: ``(B, H * W, C)`` -> ``(B, H * W, C)``, with
    ``need_attn`` also the window maps ``(B * nW, heads, w * w, w * w)``. Another ``window_msa`` than
    :class:`~mmvitreg.models.layers.WindowAttention` runs mmpretrain's forward, untraced.
    """

    def layout(self, hw_shape: Tuple[int, int]) -> WindowLayout:
        """The windows on ``hw_shape``, with mmpretrain's rules for maps as small as a window."""
        window, shift = self.window_size, self.shift_size
        if min(hw_shape) < window and not self.pad_small_map:
            raise BackboneValueError(
                f'The input shape {tuple(hw_shape)} is smaller than the window size ({window}): '
                'set pad_small_map=True (downstream use) or a smaller window_size'
            )
        if min(hw_shape) == window and not self.pad_small_map:
            shift = 0  # the official classification behaviour: no shift when one window covers the map
        return WindowLayout(tuple(hw_shape), window, shift)

    def forward(self, query: Tensor, hw_shape, need_attn: bool = False, ride: Optional[Ride] = None):
        if not isinstance(self.w_msa, WindowAttention):
            if need_attn or ride is not None:
                raise BackboneValueError(
                    f'a trace taps WindowAttention, not {type(self.w_msa).__name__}: drop '
                    'attn_cfgs.window_msa from stage_cfgs or tap no block'
                )
            return super().forward(query, hw_shape)
        layout = self.layout(hw_shape)
        h = self.w_msa(layout.partition(query), mask=layout.attn_mask(query.device), need_attn=need_attn, ride=ride)
        h, attn = h if need_attn else (h, None)
        h = drop_path(layout.reverse(h), self.drop)
        return (h, attn) if need_attn else h


class SwinBlock(MMPretrainSwinBlock):
    """mmpretrain's ``SwinBlock`` run by its modules, :class:`ShiftWindowAttention` and
    :class:`~mmvitreg.models.layers.drop_path.FFN`: ``forward(x, hw_shape, need_attn=False, ride=None)``,
    ``(B, H * W, C)`` -> ``(B, H * W, C)``, with ``need_attn`` also the window maps."""

    def forward(self, x: Tensor, hw_shape, need_attn: bool = False, ride: Optional[Ride] = None):
        return run_block(self, x, hw_shape, need_attn=need_attn, ride=ride)

    def _forward(self, x: Tensor, hw_shape, need_attn: bool, ride: Optional[Ride]):
        h = self.attn(self.norm1(x), hw_shape, need_attn=need_attn, ride=ride)
        h, attn = h if need_attn else (h, None)
        x = x + h
        x = self.ffn(self.norm2(x), identity=x)
        return (x, attn) if need_attn else x


class SwinStage(SwinBlockSequence):
    """mmpretrain's ``SwinBlockSequence`` whose forward also runs its blocks through a trace (numbered from
    ``first_block``) and tells it of the patch merging (:meth:`merge`)."""

    def forward(
        self, x: Tensor, in_shape, do_downsample: bool = True, trace: Optional[TokenTrace] = None, first_block: int = 0
    ):
        for i, block in enumerate(self.blocks):
            if trace is None:
                x = block(x, in_shape)
            else:
                run = lambda x, need_attn, ride: block(x, in_shape, need_attn=need_attn, ride=ride)  # noqa: E731
                x = trace.block(first_block + i, run, x, in_shape, block.attn.layout(in_shape))
        if self.downsample is not None and do_downsample:
            return self.merge(x, in_shape, trace)
        return x, in_shape

    def merge(self, x: Tensor, in_shape, trace: Optional[TokenTrace] = None):
        """Patch merging of the tokens ``(B, H * W, C)`` (and of a trace's stream)."""
        x, out_shape = self.downsample(x, in_shape)
        if trace is not None:
            trace.downsample(in_shape, out_shape)
        return x, out_shape


@MODELS.register_module()
class SwinTransformer(MMPretrainSwinTransformer):
    """mmpretrain's Swin Transformer with the token trace and fused window attention.

    `Swin Transformer: Hierarchical Vision Transformer using Shifted Windows
    <https://arxiv.org/abs/2103.14030>`_. Built by mmpretrain's own ``__init__``, with
    :class:`~mmvitreg.models.layers.WindowAttention` as the window attention, so mmpretrain, mmseg and mmdet Swin
    checkpoints load unchanged and give the same outputs; official releases go through :func:`convert_swin`.

    ``forward(x, trace=None)`` runs mmpretrain's modules as modules (their hooks fire) by mmvitreg's ``forward`` of
    each, in fewer operators: :class:`SwinStage`, :class:`SwinBlock`, :class:`ShiftWindowAttention` and
    :class:`~mmvitreg.models.layers.drop_path.FFN`. With a :class:`~mmvitreg.models.trace.TokenTrace` it calls
    (what it offers: :attr:`trace_spec`):

    * ``start`` with the ``(B, H/4 * W/4, C)`` patch tokens before the absolute position embedding;
    * ``block`` for every block, numbered across stages, with its grid and
      :class:`~mmvitreg.models.layers.WindowLayout`: tokens ``(B, H_s * W_s, C_s)`` before any stage norm, window
      maps ``(B * nW, heads, w * w, w * w)`` before attention dropout (only tapped blocks leave the fused kernel);
    * ``downsample`` at every patch merging;
    * ``stage`` with every stage's output after its patch merging, before any norm (the official DRLoc
      ``--use_multiscale`` maps), whatever ``out_after_downsample``;
    * ``end`` with the last stage's tokens after its output norm (raw when the last stage is not an output).

    Args:
        **kwargs: The arguments of mmpretrain's ``SwinTransformer``; ``stage_cfgs.block_cfgs.attn_cfgs.window_msa``
            defaults to ``WindowAttention``.
    """

    def __init__(self, arch='tiny', stage_cfgs=dict(), **kwargs):
        check_drop_path_rate(kwargs.get('drop_path_rate', 0.1))  # mmpretrain's default
        super().__init__(
            arch=check_arch(arch, self.arch_zoo, ('embed_dims', 'depths', 'num_heads')),
            stage_cfgs=self._with_window_attention(stage_cfgs),
            **kwargs,
        )
        for stage in self.stages:  # built by mmpretrain's constructor, run by mmvitreg's forward (no new keys)
            stage.__class__ = SwinStage
            for block in stage.blocks:
                block.__class__, block.attn.__class__, block.ffn.__class__ = SwinBlock, ShiftWindowAttention, FFN
        # what a trace gets: every block (numbered across stages), all services, 'final' and 'stages'
        self.trace_spec = TraceSpec(
            num_blocks=sum(len(stage.blocks) for stage in self.stages),
            channels=tuple(stage.embed_dims for stage in self.stages for _ in stage.blocks),
            services={'mix', 'attn', 'stream'},
            points={'final', 'stages'},
            out_types=('featmap',),
            out_type='featmap',
            stage_channels=tuple(stage.out_channels for stage in self.stages),
            out_channels=tuple(self.num_features[i] for i in range(len(self.stages)) if i in self.out_indices),
            patch_stride=self.patch_embed.projection.stride[0],
        )

    @staticmethod
    def _with_window_attention(stage_cfgs):
        """``stage_cfgs`` (one dict or one per stage, each with one ``block_cfgs`` or one per block) with
        ``WindowAttention`` for mmpretrain's default ``WindowMSA``; a user's other ``window_msa`` stays."""

        def block(cfg):
            attn_cfgs = dict(cfg.get('attn_cfgs', {}))
            if attn_cfgs.get('window_msa', WindowMSA) is WindowMSA:
                attn_cfgs['window_msa'] = WindowAttention
            return dict(cfg, attn_cfgs=attn_cfgs)

        def stage(cfg):
            blocks = cfg.get('block_cfgs', {})
            return dict(cfg, block_cfgs=[block(b) for b in blocks] if isinstance(blocks, Sequence) else block(blocks))

        return [stage(cfg) for cfg in stage_cfgs] if isinstance(stage_cfgs, Sequence) else stage(stage_cfgs)

    def init_weights(self):
        self.init_cfg = own_pretrained(self.init_cfg)
        super().init_weights()

    @property
    def left_out(self) -> Tuple[str, ...]:
        """The stage output norms not built (:func:`~mmvitreg.models.backbones.init_cfg.unbuilt`)."""
        return unbuilt(self, (f'norm{i}' for i in range(self.num_layers)))

    def train(self, mode: bool = True) -> 'SwinTransformer':
        """mmpretrain's ``train``, returning ``self`` as ``nn.Module`` does."""
        super().train(mode)
        return self

    def forward(self, x: Tensor, trace: Optional[TokenTrace] = None) -> Tuple[Tensor, ...]:
        """Embed ``x`` ``(B, 3, H, W)`` and run the stages; ``(B, C_i, H_i, W_i)`` per ``out_indices``."""
        x, hw = self.patch_embed(x)
        if trace is not None:
            x = trace.start(self.trace_spec, x, hw, type(self).__name__)
        if self.use_abs_pos_embed:
            x = x + resize_pos_embed(
                self.absolute_pos_embed, self.patch_resolution, hw, self.interpolate_mode, self.num_extra_tokens
            )
        x = self.drop_after_pos(x)

        outs, first_block = [], 0
        for i, stage in enumerate(self.stages):
            x, hw = stage(x, hw, do_downsample=self.out_after_downsample, trace=trace, first_block=first_block)
            first_block += len(stage.blocks)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(x)
                outs.append(out.view(-1, *hw, self.num_features[i]).permute(0, 3, 1, 2).contiguous())
            if trace is not None and i == len(self.stages) - 1:
                trace.end(out if i in self.out_indices else x)
            if stage.downsample is not None and not self.out_after_downsample:
                x, hw = stage.merge(x, hw, trace)
            if trace is not None:
                trace.stage(i, x, hw)
        return tuple(outs)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        """mmpretrain's upgrade of version-1/2 Swin checkpoints (``norm.`` -> ``norm{last}.``, no
        ``attn_mask`` buffers), which mmpretrain applies to its own class only."""
        version = local_metadata.get('version', None)
        for key in [k for k in state_dict if k.startswith(prefix)]:
            name = key[len(prefix) :]
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
    """Official Swin release (microsoft/Swin-Transformer) -> mmvitreg / mmpretrain classifier keys (the rules
    below, under ``backbone.``; ``head`` -> ``head.fc``; ``attn_mask`` buffers dropped), the patch-merging weights
    reordered by :func:`_unfold_order`.

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


register_layout(
    OfficialLayout(
        'official Swin Transformer (microsoft/Swin-Transformer)',
        convert_swin,
        converter_tool('swin'),
        "mmvitreg.SwinTransformer with mmpretrain's LinearClsHead",
        frozenset({r'^patch_embed\.proj\.weight$', r'^layers\.\d+\.blocks\.\d+\.attn\.relative_position_'}),
    )
)
