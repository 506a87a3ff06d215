"""Shared by the inference, export and compile tests: a composed model (DeepViT re-attention trained with
TL-Align, DRLoc and a DiversePatch loss in one ``mmvitreg.TokenClassifier``, on the bundled digits) and
random checkpoints of a config's model."""

from pathlib import Path

import torch
from conftest import CONFIGS
from mmengine.registry import DefaultScope

from mmvitreg.utils import build_model

COMPOSED = f'''
_base_ = '{CONFIGS / 'deepvit' / 'deepvit-tiny_1xb64_digits.py'}'
model = dict(
    type='mmvitreg.TokenClassifier',
    target_transform=dict(type='mmvitreg.TLAlign', num_layers=4),
    aux_losses=[
        dict(type='mmvitreg.DRLoc', in_channels=96, layers=(-1, ), loss_weight=0.1, target='abs', reduction='mean',
             replacement=True),
        dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0),
    ],
    train_cfg=dict(_delete_=True, mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=4)),
)
'''


def composed_config(folder: Path) -> Path:
    """Write the composed config (DeepViT + TL-Align + DRLoc + PatchCosineLoss) into ``folder``."""
    path = folder / 'deepvit-tiny_tlalign-drloc-diversepatch_digits.py'
    path.write_text(COMPOSED)
    return path


def random_checkpoint(cfg, path: Path, meta: dict = None):
    """Save a checkpoint of ``cfg``'s model with every float tensor randomised around its initialisation
    (BatchNorm variances kept >= 1), so no zero-initialised part hides a mistake; the same for the same
    ``cfg``. Returns the path."""
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = build_model(cfg, None, 'cpu')
    g = torch.Generator().manual_seed(0)
    state = {}
    for key, value in model.state_dict().items():
        if value.is_floating_point():
            value = value + 0.1 * torch.randn(value.shape, generator=g)
            if key.endswith('running_var'):
                value = value.abs() + 1
        state[key] = value
    torch.save(dict(state_dict=state, meta=meta or {}), path)
    return path
