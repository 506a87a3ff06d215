"""Activation checkpointing (``with_cp``, as mmseg's ViT and mmpretrain's Swin) in the ViT family and Swin: a
training step with a trace, TL-Align's labels riding in every attention and DRLoc / DiversePatch taps gives the
losses and gradients of the step without it (stochastic depth on), keeping a fraction of the activations."""

import numpy as np
import pytest
import torch
from conftest import CONFIGS
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmpretrain.structures import DataSample
from model_helpers import composed_config

from mmvitreg.utils import build_model

SWIN_TLALIGN_DRLOC = dict(aux_losses=[dict(type='mmvitreg.DRLoc', in_channels=64, layers=(-1,), loss_weight=0.1)])


def train_step(cfg: Config, with_cp: bool):
    """Losses, gradients and the bytes the backbone's blocks saved for the backward in one step of ``cfg``'s
    model."""
    cfg.model.backbone.with_cp = with_cp
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = build_model(cfg, None, 'cpu').train()
    data = dict(
        inputs=list(torch.randint(0, 255, (4, 3, 32, 32), dtype=torch.uint8)),
        data_samples=[DataSample().set_gt_label(i) for i in range(4)],
    )
    torch.manual_seed(1)
    np.random.seed(1)
    saved, inside = [], []
    backbone = model.backbone
    swin = hasattr(backbone, 'stages')
    for block in [b for stage in backbone.stages for b in stage.blocks] if swin else backbone.layers:
        block.register_forward_pre_hook(lambda *_: inside.append(True))
        block.register_forward_hook(lambda *_: inside.clear())
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved.append(t.numel() * t.element_size() if inside else 0) or t, lambda t: t
    ):
        losses = model(**model.data_preprocessor(data, True), mode='loss')
    sum(losses.values()).backward()
    return losses, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, sum(saved)


@pytest.mark.parametrize('config', ['deepvit', 'swin'])
def test_with_cp_trains_as_without_it_with_a_ride_and_taps(config, tmp_path):
    if config == 'deepvit':  # re-attention (its explicit map carries the ride) + TL-Align + DRLoc + PatchCosineLoss
        cfg = Config.fromfile(str(composed_config(tmp_path)))
    else:  # windows: the labels ride in every window attention, through the shift and the patch merging
        cfg = Config.fromfile(str(CONFIGS / 'tlalign' / 'swin-nano_1xb64_cutmix-tlalign_digits.py'))
        cfg.merge_from_dict(dict(model=SWIN_TLALIGN_DRLOC))
    assert cfg.model.backbone.drop_path_rate > 0 and cfg.model.target_transform.type == 'mmvitreg.TLAlign'
    plain_losses, plain_grads, plain_saved = train_step(cfg, False)
    losses, grads, saved = train_step(cfg, True)
    assert set(losses) == set(plain_losses) and 'loss_drloc' in losses
    for name in losses:
        torch.testing.assert_close(losses[name], plain_losses[name], rtol=0, atol=0)
    assert set(grads) == set(plain_grads) and len(grads) > 20
    for name in grads:
        torch.testing.assert_close(grads[name], plain_grads[name], rtol=1e-5, atol=1e-7)
    assert saved < plain_saved / 10  # the blocks' activations are recomputed, not kept


def grad_refused(model, x, **kwargs) -> bool:
    """Whether ``torch.autograd.grad`` refuses the training forward of ``model`` (a reentrant checkpoint does)."""
    model.train()  # mmpretrain's Swin.train returns None
    out = model(x, **kwargs)[-1]
    try:
        torch.autograd.grad(out.sum(), [p for p in model.parameters() if p.requires_grad], allow_unused=True)
    except RuntimeError:
        return True
    return False


def test_checkpoints_are_the_hosts_reentrant_ones_and_non_reentrant_when_tapped():
    """mmseg's ViT and mmpretrain's Swin call ``cp.checkpoint`` with torch's default, the reentrant variant, which
    ``torch.autograd.grad`` refuses; mmvitreg's blocks do the same, except blocks a trace taps (non-reentrant: the
    reentrant forward runs without autograd and would cut the ride's values from the graph)."""
    from mmpretrain.models import SwinTransformer as HostSwin
    from mmseg.models.backbones import VisionTransformer as HostViT

    from mmvitreg.models.backbones import SwinTransformer, VisionTransformer
    from mmvitreg.models.trace import TokenTrace

    x = torch.randn(2, 3, 32, 32)
    vit = dict(img_size=32, patch_size=8, embed_dims=16, num_layers=2, num_heads=2, mlp_ratio=2, with_cp=True)
    swin = dict(
        arch=dict(embed_dims=16, depths=(2, 2), num_heads=(2, 2)),
        img_size=32,
        window_size=4,
        out_indices=(1,),
        with_cp=True,
    )
    assert grad_refused(HostViT(**vit), x) and grad_refused(HostSwin(**swin), x)
    ours = [
        VisionTransformer(
            arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32),
            img_size=32,
            patch_size=8,
            with_cp=True,
        ),
        SwinTransformer(**swin),
    ]
    for model, blocks in zip(ours, (2, 4)):
        assert grad_refused(model, x)
        assert not grad_refused(model, x, trace=TokenTrace(attn_layers=tuple(range(blocks))))
