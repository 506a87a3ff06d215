"""Conversion of official checkpoints to mmvitreg classifier state dicts: the *convert* stage of the loading pass
(:func:`convert_checkpoint`, :mod:`mmvitreg.engine.checkpoint`); this module reads no file. Each release layout is
an :class:`OfficialLayout`: the timm / DeiT and DiversePatch ones here, the DeepViT, LV-ViT and Swin ones beside
their backbones.
"""

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence

from mmengine.logging import print_log
from torch import Tensor

from mmvitreg.fileio import CheckpointError

# timm key pattern -> mmvitreg backbone key (mmpretrain VisionTransformer layout).
BACKBONE_RENAMES = (
    (r'^(cls_token|pos_embed)$', r'\1'),
    (r'^patch_embed\.proj\.', 'patch_embed.projection.'),
    (r'^patch_embed\.((conv|bn)\d+\.)', r'patch_embed.\1'),
    (r'^blocks\.(\d+)\.norm1\.', r'layers.\1.ln1.'),
    (r'^blocks\.(\d+)\.norm2\.', r'layers.\1.ln2.'),
    (r'^blocks\.(\d+)\.attn\.', r'layers.\1.attn.'),
    (r'^blocks\.(\d+)\.mlp\.fc1\.', r'layers.\1.ffn.layers.0.0.'),
    (r'^blocks\.(\d+)\.mlp\.fc2\.', r'layers.\1.ffn.layers.1.'),
    (r'^norm\.', 'ln1.'),
)
# The cls-token head under mmpretrain's ``VisionTransformerClsHead`` names.
CLS_HEAD_RENAMES = {'head.': 'head.layers.head.'}


#: where official codes keep the model's and the EMA's weights (timm's ``train.py``, DeiT-based codes)
WEIGHTS_KEYS = ('state_dict', 'model')
EMA_KEYS = ('state_dict_ema', 'model_ema')


def unwrap_checkpoint(checkpoint: Mapping, ema: bool = False) -> Dict[str, Tensor]:
    """The state dict inside a read ``checkpoint`` (:data:`WEIGHTS_KEYS`, then :data:`EMA_KEYS`; those first with
    ``ema``), or the checkpoint itself when it is a bare state dict."""
    order = EMA_KEYS + WEIGHTS_KEYS if ema else WEIGHTS_KEYS + EMA_KEYS
    for key in order:
        if key in checkpoint and isinstance(checkpoint[key], Mapping):
            return checkpoint[key]
    if all(isinstance(v, Tensor) for v in checkpoint.values()):
        return checkpoint
    raise KeyError(f'no state dict found in the checkpoint (looked for {order}); top-level keys: {sorted(checkpoint)}')


#: mmengine's default ``revise_keys`` (``Runner.load_checkpoint``, ``load_checkpoint``): DDP's ``module.`` dropped
REVISE_KEYS = ((r'^module\.', ''),)


def revise_keys(state_dict: Mapping[str, Tensor], rules: Sequence = REVISE_KEYS) -> 'OrderedDict[str, Tensor]':
    """``state_dict`` with every key rewritten by ``rules`` (``(pattern, replacement)`` pairs, in order, as
    mmengine's ``revise_keys``) and its ``_metadata`` kept: the one place the loading pass revises keys."""
    revised = OrderedDict(state_dict)
    for pattern, replacement in rules:
        revised = OrderedDict((re.sub(pattern, replacement, k), v) for k, v in revised.items())
    revised._metadata = getattr(state_dict, '_metadata', OrderedDict())
    return revised


def rename_keys(
    state_dict: Mapping[str, Tensor], backbone_rules, head_renames: Mapping[str, str], skip: Optional[str] = None
) -> 'OrderedDict[str, Tensor]':
    """Rename a revised foreign state dict by regex rules: backbone keys under ``backbone.``, head prefixes by
    ``head_renames``; keys matching ``skip`` (a regex) are dropped, any other key no rule knows is a ValueError."""
    out, unknown = OrderedDict(), []
    for key, value in state_dict.items():
        if skip and re.search(skip, key):
            continue
        for pattern, repl in backbone_rules:
            if re.match(pattern, key):
                out['backbone.' + re.sub(pattern, repl, key)] = value
                break
        else:
            prefix = next((p for p in head_renames if key.startswith(p)), None)
            if prefix is None:
                unknown.append(key)
            else:
                out[head_renames[prefix] + key[len(prefix) :]] = value
    if unknown:
        raise ValueError(f'keys with no mmvitreg counterpart: {unknown}; known heads: {sorted(head_renames)}')
    return out


def convert_timm_vit(
    state_dict: Mapping[str, Tensor], head_renames: Optional[Mapping[str, str]] = None
) -> 'OrderedDict[str, Tensor]':
    """A timm-layout ViT state dict (official DeiT, DeepViT, LV-ViT, DiversePatch) renamed to an mmpretrain-style
    classifier's: backbone keys by :data:`BACKBONE_RENAMES` (attention sub-keys keep their names), head prefixes by
    ``head_renames`` (default :data:`CLS_HEAD_RENAMES`); :func:`rename_keys` raises on a key no rule knows."""
    return rename_keys(state_dict, BACKBONE_RENAMES, CLS_HEAD_RENAMES if head_renames is None else head_renames)


def convert_diversepatch(state_dict: Mapping[str, Tensor], mixing_index: int = 2) -> 'OrderedDict[str, Tensor]':
    """Official DiversePatch state dict (ChengyueGongR/PatchVisionTransformer ``deit/models.py``) -> a
    ``TokenClassifier``'s: an mmvitreg ``VisionTransformer`` (``attn_types='talking_heads'`` for the official
    default ``use_talk=True``: ``proj_pre`` / ``proj_post`` keep their names), a ``VisionTransformerClsHead`` and
    the ``PatchMixingLoss`` at ``aux_losses[mixing_index]`` (``patch_head``; 2 in this package's configs)."""
    return convert_timm_vit(state_dict, {**CLS_HEAD_RENAMES, 'patch_head.': f'aux_losses.{mixing_index}.patch_head.'})


@dataclass(frozen=True)
class OfficialLayout:
    """An official release's key layout: its ``name`` (as logs and errors say it), ``convert`` (official state dict
    -> mmvitreg classifier state dict), ``tool`` (the offline converter), ``model`` (the model it converts to) and
    ``needs`` (regexes, each matching some key of the release)."""

    name: str
    convert: Callable[[Mapping[str, Tensor]], Dict[str, Tensor]]
    tool: str
    model: str
    needs: FrozenSet[str]

    def matches(self, keys) -> bool:
        return all(any(re.search(p, k) for k in keys) for p in self.needs)


#: the keys every timm-layout ViT release has (DeiT, DeepViT, LV-ViT, DiversePatch)
TIMM_VIT_KEYS = frozenset({r'^patch_embed\.proj\.weight$', r'^cls_token$', r'^blocks\.0\.attn\.qkv\.weight$'})
#: the release layouts :func:`detect_layout` recognises, most specific first (the one that asks for the most keys:
#: DeepViT, LV-ViT and DiversePatch are timm ViTs with extra keys, tried before the plain timm / DeiT layout)
LAYOUTS: List[OfficialLayout] = []


def register_layout(layout: OfficialLayout) -> OfficialLayout:
    """Add a release layout to :data:`LAYOUTS` (a backbone module registers its own)."""
    if all(known.name != layout.name for known in LAYOUTS):
        LAYOUTS.append(layout)
        LAYOUTS.sort(key=lambda known: -len(known.needs))  # stable: registration order among equals
    return layout


def converter_tool(name: str) -> str:
    """The offline converter of ``name`` in ``tools/model_converters/``."""
    return f'tools/model_converters/{name}_to_mmvitreg.py'


def detect_layout(state_dict: Mapping[str, Tensor]) -> Optional[OfficialLayout]:
    """The official release layout of ``state_dict`` (keys revised: :func:`revise_keys`), or None for any other
    layout (mmvitreg / mmpretrain / mmseg / mmdet checkpoints, which load as they are)."""
    return next((layout for layout in LAYOUTS if layout.matches(list(state_dict))), None)


def convert_checkpoint(checkpoint: Mapping, filename: str, rules: Sequence = REVISE_KEYS, logger='current') -> dict:
    """Stage 2 of the loading pass (:mod:`mmvitreg.engine.checkpoint`): a read ``checkpoint`` -> ``{'state_dict':
    ...}`` for mmengine's loaders, keys revised by ``rules`` first.

    An official release (raw or wrapped, :func:`unwrap_checkpoint`) is converted by its layout (the model's
    weights, not the EMA's), with one log line, and its ``meta`` names the layout; a checkpoint with a
    ``state_dict`` keeps its other entries; any other weights go under ``state_dict``. A checkpoint without
    weights, or a release its converter cannot convert, is a :class:`CheckpointError`.
    """
    try:
        state_dict = revise_keys(unwrap_checkpoint(checkpoint), rules)
    except KeyError as e:
        raise CheckpointError(f'checkpoint {filename}: {e.args[0]}') from None
    layout = detect_layout(state_dict)
    if layout is None:
        return {**(checkpoint if 'state_dict' in checkpoint else {}), 'state_dict': state_dict}
    try:
        converted = layout.convert(state_dict)
    except ValueError as e:
        raise CheckpointError(
            f'checkpoint {filename} looks like the {layout.name} release layout but does not convert: {e}'
        ) from None
    print_log(
        f'checkpoint {filename}: {layout.name} release layout, converted on load by '
        f'{layout.convert.__module__}.{layout.convert.__name__} (as `python {layout.tool} SRC DST` '
        'does offline)',
        logger=logger,
    )
    return {'state_dict': converted, 'meta': dict(official_layout=layout.name, official_model=layout.model)}


register_layout(
    OfficialLayout(
        'official DiversePatch (ChengyueGongR/PatchVisionTransformer)',
        convert_diversepatch,
        converter_tool('diversepatch'),
        "mmvitreg.VisionTransformer (attn_types='talking_heads' where the file has proj_pre) in a TokenClassifier "
        'whose aux_losses[2] is mmvitreg.PatchMixingLoss',
        TIMM_VIT_KEYS | {r'^patch_head\.weight$|\.attn\.proj_pre\.weight$'},
    )
)
# timm's DeiT renaming is the DeepViT converter's (convert_deepvit is convert_timm_vit)
register_layout(
    OfficialLayout(
        'timm / DeiT ViT (facebookresearch/deit, Euphoria16/TL-Align)',
        convert_timm_vit,
        converter_tool('deepvit'),
        "mmpretrain's or mmvitreg's VisionTransformer with VisionTransformerClsHead",
        TIMM_VIT_KEYS,
    )
)

#: parameters some models lack (regex on the converted key) -> what takes them (:func:`where_keys_belong`)
KEY_TAKERS = (
    (
        r'\.attn\.proj_(pre|post)\.',
        "talking-heads attention: a config with attn_types='talking_heads' in the "
        "backbone's arch (e.g. configs/diversepatch/deit-base12-talking-heads_4xb256-400e_diversepatch_in1k.py)",
    ),
    (
        r'\.attn\.(reatten_matrix|var_norm)\.',
        "re-attention: mmvitreg.DeepViT with attn_types 'reattn' in those blocks (configs/deepvit/deepvit-*.py)",
    ),
    (r'^head\.aux_head\.', "the token-labeling head mmvitreg.TokenLabelHead (configs/lvvit/lvvit-*_tl_in1k.py)"),
    (
        r'^aux_losses\.\d+\.patch_head\.',
        'the DiversePatch mixing loss mmvitreg.PatchMixingLoss (configs/diversepatch/*_diversepatch_*.py)',
    ),
)


def where_keys_belong(keys) -> List[str]:
    """What takes the ``keys`` a model had no place for (:data:`KEY_TAKERS`), each named once, in table order."""
    return [taker for pattern, taker in KEY_TAKERS if any(re.search(pattern, k) for k in keys)]
