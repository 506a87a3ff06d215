"""Conversion of foreign checkpoints (timm-layout ViTs, official Swin) to mmvitreg classifier state dicts.

The official DeepViT, LV-ViT, DeiT and DiversePatch codes all keep timm's ViT layout
(``patch_embed.proj``, ``blocks.{i}.norm1`` / ``attn`` / ``norm2`` / ``mlp.fc1`` / ``mlp.fc2``,
``norm``, ``head``). The per-model converters beside the presets
(:func:`~mmvitreg.models.backbones.deepvit.convert_deepvit`,
:func:`~mmvitreg.models.backbones.lvvit.convert_lvvit`) call :func:`convert_timm_vit`.
"""
import argparse
import re
from collections import OrderedDict
from typing import Callable, Dict, Mapping, Optional, Sequence

import torch
from torch import Tensor

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


def unwrap_checkpoint(checkpoint: Mapping, ema: bool = False) -> Dict[str, Tensor]:
    """The state dict inside a saved checkpoint: ``state_dict`` / ``model`` / ``state_dict_ema``.

    Args:
        checkpoint (Mapping): What ``torch.load`` returned.
        ema (bool): Prefer the EMA weights (``state_dict_ema``) when present. Defaults to False.
    """
    order = ('state_dict_ema', 'state_dict', 'model') if ema else ('state_dict', 'model', 'state_dict_ema')
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
                            ema: bool = False) -> Dict[str, Tensor]:
    """Load an official checkpoint file, convert its state dict with ``convert`` and save it.

    The output file holds ``{'state_dict': converted}``, loadable by mmengine's ``load_checkpoint``
    and by ``init_cfg=dict(type='Pretrained', checkpoint=dst)`` (with ``prefix='backbone.'`` for a
    backbone alone). Official checkpoints are pickles with non-tensor entries, so they are loaded
    with ``weights_only=False``: convert only files you trust.
    """
    checkpoint = torch.load(src, map_location='cpu', weights_only=False)
    converted = convert(unwrap_checkpoint(checkpoint, ema=ema))
    torch.save({'state_dict': converted}, dst)
    return converted


def converter_cli(convert: Callable[[Dict[str, Tensor]], Dict[str, Tensor]], description: str,
                  argv: Optional[Sequence[str]] = None) -> None:
    """Command line ``SRC DST [--ema]`` of the tools in ``tools/model_converters/``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('src', help='official checkpoint (.pth / .pth.tar)')
    parser.add_argument('dst', help='output checkpoint')
    parser.add_argument('--ema', action='store_true', help='convert the EMA weights (state_dict_ema) if present')
    args = parser.parse_args(argv)
    converted = convert_checkpoint_file(args.src, args.dst, convert, ema=args.ema)
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
