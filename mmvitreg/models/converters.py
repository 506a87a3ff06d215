"""Conversion of foreign checkpoints (timm-layout ViTs, official Swin) to mmvitreg classifier state dicts.

The official DeepViT, LV-ViT, DeiT and DiversePatch codes all keep timm's ViT layout
(``patch_embed.proj``, ``blocks.{i}.norm1`` / ``attn`` / ``norm2`` / ``mlp.fc1`` / ``mlp.fc2``,
``norm``, ``head``). The per-model converters beside the presets
(:func:`~mmvitreg.models.backbones.deepvit.convert_deepvit`,
:func:`~mmvitreg.models.backbones.lvvit.convert_lvvit`) call :func:`convert_timm_vit`.

:func:`detect_layout` recognises each official release by its keys (:data:`OFFICIAL_LAYOUTS`);
:func:`convert_official` turns any checkpoint into mmengine's ``{'state_dict': ...}`` form, converting an
official release on the way. ``mmvitreg.engine.checkpoint`` calls it on every load (``load_from``,
``init_cfg=dict(type='Pretrained')``, ``tools/test.py``); the tools in ``tools/model_converters/`` write
the same conversion to a file.
"""
import argparse
import re
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Dict, FrozenSet, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor

from mmvitreg.compat import UNSAFE_LOAD_HELP, load_checkpoint

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


#: where official codes keep the weights in a saved checkpoint: the model's, then the EMA's (timm's
#: ``train.py``: ``state_dict`` / ``state_dict_ema``; DeiT-based codes: ``model`` / ``model_ema``)
WEIGHTS_KEYS = ('state_dict', 'model')
EMA_KEYS = ('state_dict_ema', 'model_ema')


def unwrap_checkpoint(checkpoint: Mapping, ema: bool = False) -> Dict[str, Tensor]:
    """The state dict inside a saved checkpoint: ``state_dict`` / ``model`` / ``state_dict_ema`` /
    ``model_ema``, or the checkpoint itself when it is a bare state dict.

    Args:
        checkpoint (Mapping): What ``torch.load`` returned.
        ema (bool): Prefer the EMA weights (``state_dict_ema``, ``model_ema``) when present. Defaults to False.
    """
    order = EMA_KEYS + WEIGHTS_KEYS if ema else WEIGHTS_KEYS + EMA_KEYS
    for key in order:
        if key in checkpoint and isinstance(checkpoint[key], Mapping):
            return dict(checkpoint[key])
    if all(isinstance(v, Tensor) for v in checkpoint.values()):
        return dict(checkpoint)
    raise KeyError(f'no state dict found in the checkpoint (looked for {order}); top-level keys: '
                   f'{sorted(checkpoint)}')


def rename_keys(state_dict: Mapping[str, Tensor], backbone_rules, head_renames: Mapping[str, str],
                skip: Optional[str] = None) -> 'OrderedDict[str, Tensor]':
    """Rename a foreign state dict by regex rules: backbone keys under ``backbone.``, head prefixes by
    ``head_renames``; keys matching ``skip`` (a regex) are dropped, a leading ``module.`` (DDP) too.

    Raises:
        ValueError: listing every key that matches no rule (nothing is dropped silently).
    """
    out, unknown = OrderedDict(), []
    for key, value in state_dict.items():
        key = key[len('module.'):] if key.startswith('module.') else key
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
                out[head_renames[prefix] + key[len(prefix):]] = value
    if unknown:
        raise ValueError(f'keys with no mmvitreg counterpart: {unknown}; known heads: {sorted(head_renames)}')
    return out


def convert_timm_vit(state_dict: Mapping[str, Tensor],
                     head_renames: Optional[Mapping[str, str]] = None) -> 'OrderedDict[str, Tensor]':
    """Rename a timm-layout ViT state dict to an mmpretrain-style classifier state dict.

    Backbone keys go under ``backbone.`` (``patch_embed.proj`` -> ``patch_embed.projection``,
    ``blocks.{i}.norm1`` -> ``layers.{i}.ln1``, ``mlp.fc1`` -> ``ffn.layers.0.0``, ``mlp.fc2`` ->
    ``ffn.layers.1``, ``norm`` -> ``ln1``; attention sub-keys such as ``qkv``, ``proj``,
    ``reatten_matrix``, ``var_norm``, ``proj_pre`` keep their names); head keys are renamed by
    ``head_renames`` (prefix -> prefix). A leading ``module.`` (DDP) is dropped.

    Args:
        state_dict (Mapping[str, Tensor]): The official state dict.
        head_renames (Mapping[str, str], optional): Head key prefixes and their new names. Defaults
            to ``{'head.': 'head.layers.head.'}``.

    Raises:
        ValueError: listing every key that matches no rule (nothing is dropped silently).
    """
    return rename_keys(state_dict, BACKBONE_RENAMES, CLS_HEAD_RENAMES if head_renames is None else head_renames)


def convert_checkpoint_file(src: str, dst: str, convert: Callable[[Dict[str, Tensor]], Dict[str, Tensor]],
                            ema: bool = False, unsafe_load: bool = False) -> Dict[str, Tensor]:
    """Load an official checkpoint file, convert its state dict with ``convert`` and save it.

    The output file holds ``{'state_dict': converted}``, loadable by mmengine's ``load_checkpoint``
    and by ``init_cfg=dict(type='Pretrained', checkpoint=dst)`` (with ``prefix='backbone.'`` for a
    backbone alone). ``src`` is read by :func:`mmvitreg.compat.load_checkpoint` (``weights_only=True`` and
    the allow-list, which covers the official releases' non-tensor entries); ``unsafe_load=True`` (or
    ``MMVITREG_UNSAFE_LOAD=1``) unpickles anything, for trusted files only.

    Raises:
        mmvitreg.compat.UnsafeCheckpointError: ``src`` names a global outside the allow-list.
    """
    checkpoint = load_checkpoint(src, map_location='cpu', unsafe=unsafe_load or None)
    converted = convert(unwrap_checkpoint(checkpoint, ema=ema))
    torch.save({'state_dict': converted}, dst)
    return converted


def converter_cli(convert: Callable[[Dict[str, Tensor]], Dict[str, Tensor]], description: str,
                  argv: Optional[Sequence[str]] = None) -> None:
    """Command line ``SRC DST [--ema]`` of the tools in ``tools/model_converters/``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('src', help='official checkpoint (.pth / .pth.tar)')
    parser.add_argument('dst', help='output checkpoint')
    parser.add_argument('--ema', action='store_true',
                        help='convert the EMA weights (state_dict_ema / model_ema) if present')
    parser.add_argument('--unsafe-load', action='store_true', help=UNSAFE_LOAD_HELP)
    args = parser.parse_args(argv)
    converted = convert_checkpoint_file(args.src, args.dst, convert, ema=args.ema, unsafe_load=args.unsafe_load)
    print(f'saved {len(converted)} tensors to {args.dst}')


def convert_diversepatch(state_dict: Mapping[str, Tensor], mixing_index: int = 2) -> 'OrderedDict[str, Tensor]':
    """Official DiversePatch state dict (ChengyueGongR/PatchVisionTransformer ``deit/models.py``) -> the state
    dict of a :class:`~mmvitreg.models.classifiers.TokenClassifier` with an mmvitreg ``VisionTransformer``
    (``attn_types='talking_heads'`` for checkpoints trained with ``use_talk=True``, the official default: their
    ``blocks.{i}.attn.proj_pre`` / ``proj_post`` keep their names), a ``VisionTransformerClsHead`` (``head``) and
    the :class:`~mmvitreg.models.losses.PatchMixingLoss` at ``aux_losses[mixing_index]`` (``patch_head``; 2 in
    this package's configs: cosine, contrastive, mixing).
    """
    return convert_timm_vit(state_dict, {**CLS_HEAD_RENAMES, 'patch_head.': f'aux_losses.{mixing_index}.patch_head.'})


@dataclass(frozen=True)
class OfficialLayout:
    """An official release's key layout: how to recognise it, convert it and build its model.

    Attributes:
        name (str): The release, as the log line and errors name it.
        convert (Callable): Official state dict -> mmvitreg classifier state dict.
        tool (str): The offline converter in ``tools/model_converters/``.
        model (str): The model it converts to (what a config needs to load it).
        needs (FrozenSet[str]): Key patterns (regexes, ``re.search``): each must match some key.
    """

    name: str
    convert: Callable[[Mapping[str, Tensor]], Dict[str, Tensor]]
    tool: str
    model: str
    needs: FrozenSet[str]

    def matches(self, keys) -> bool:
        return all(any(re.search(p, k) for k in keys) for p in self.needs)


@lru_cache(maxsize=None)
def _official_layouts() -> Tuple[OfficialLayout, ...]:
    """The layouts, most specific first (DeepViT, LV-ViT and DiversePatch are timm ViTs with extra keys)."""
    from .backbones.deepvit import convert_deepvit
    from .backbones.lvvit import convert_lvvit
    from .backbones.swin_transformer import convert_swin
    timm_vit = {r'^patch_embed\.proj\.weight$', r'^cls_token$', r'^blocks\.0\.attn\.qkv\.weight$'}
    tool = 'tools/model_converters/{}_to_mmvitreg.py'.format
    return (
        OfficialLayout('official Swin Transformer (microsoft/Swin-Transformer)', convert_swin, tool('swin'),
                       "mmvitreg.SwinTransformer with mmpretrain's LinearClsHead",
                       frozenset({r'^patch_embed\.proj\.weight$',
                                  r'^layers\.\d+\.blocks\.\d+\.attn\.relative_position_'})),
        OfficialLayout('official DeepViT (zhoudaquan/dvit_repo)', convert_deepvit, tool('deepvit'),
                       "mmvitreg.DeepViT with attn_types 'reattn' where the file has reatten_matrix",
                       frozenset(timm_vit | {r'\.attn\.reatten_matrix\.weight$'})),
        OfficialLayout('official LV-ViT (zihangJiang/TokenLabeling)', convert_lvvit, tool('lvvit'),
                       'mmvitreg.LVViT with mmvitreg.TokenLabelHead', frozenset(timm_vit | {r'^aux_head\.weight$'})),
        OfficialLayout('official DiversePatch (ChengyueGongR/PatchVisionTransformer)', convert_diversepatch,
                       tool('diversepatch'), "mmvitreg.VisionTransformer (attn_types='talking_heads' where the file "
                       'has proj_pre) in a TokenClassifier whose aux_losses[2] is mmvitreg.PatchMixingLoss',
                       frozenset(timm_vit | {r'^patch_head\.weight$|\.attn\.proj_pre\.weight$'})),
        # timm's DeiT renaming is the DeepViT converter's (convert_deepvit is convert_timm_vit)
        OfficialLayout('timm / DeiT ViT (facebookresearch/deit, Euphoria16/TL-Align)', convert_timm_vit,
                       tool('deepvit'), "mmpretrain's or mmvitreg's VisionTransformer with VisionTransformerClsHead",
                       frozenset(timm_vit)),
    )


def detect_layout(state_dict: Mapping[str, Tensor]) -> Optional[OfficialLayout]:
    """The official release layout of ``state_dict`` (a leading ``module.`` ignored), or None for any other
    layout (mmvitreg / mmpretrain / mmseg / mmdet checkpoints, which load as they are)."""
    keys = [k[len('module.'):] if k.startswith('module.') else k for k in state_dict]
    return next((layout for layout in _official_layouts() if layout.matches(keys)), None)


def convert_official(checkpoint: Mapping) -> Tuple[dict, Optional[OfficialLayout]]:
    """Any checkpoint -> ``({'state_dict': ...}, layout)`` for mmengine's loaders.

    An official release (raw, or wrapped in ``state_dict`` / ``model`` / ``state_dict_ema`` / ``model_ema``,
    keys with or without ``module.``) is converted by its layout's converter (the model's weights, not the
    EMA's, when it holds both); a checkpoint that already has a ``state_dict`` is returned as it is; the
    weights of any other wrapper (``{'model': ...}``) or a bare state dict go under ``state_dict``.

    Returns:
        tuple: the checkpoint and the :class:`OfficialLayout` it was converted from (None if not converted).

    Raises:
        KeyError: the checkpoint holds no state dict.
        ValueError: an official layout with keys its converter does not know (they are listed).
    """
    state_dict = unwrap_checkpoint(checkpoint)
    layout = detect_layout(state_dict)
    if layout is not None:
        return {'state_dict': layout.convert(state_dict)}, layout
    return (dict(checkpoint) if 'state_dict' in checkpoint else {'state_dict': state_dict}), None
