"""What the official training scripts do, in our recipes (issue 26): every trace user's own
initialisation, the official LR / λ curves, the best and a bounded number of checkpoints in every long
recipe."""
import pytest
import torch
from mmengine.config import Config
from mmengine.model import BaseModule
from torch import nn

from conftest import CONFIGS
from mmvitreg.models.classifiers import TokenClassifier
from mmvitreg.registry import MODELS


class _Linear(BaseModule):
    """A trace user with one Linear and its own init_cfg (as a head, an auxiliary loss or a target transform)."""

    def __init__(self, init_cfg):
        super().__init__(init_cfg=init_cfg)
        self.fc = nn.Linear(8, 8)


def _constant(val):
    return dict(type='Constant', layer='Linear', val=val, bias=-val)


def test_init_weights_applies_the_init_cfg_of_every_trace_user():
    """model.init_weights() reaches the head, every auxiliary loss and the target transform, each with its own
    init_cfg (a plain nn.ModuleList of auxiliary losses would never be visited)."""
    model = TokenClassifier(backbone=_Linear(None), head=_Linear(_constant(1.)),
                            aux_losses=[_Linear(_constant(2.)), _Linear(_constant(3.))],
                            target_transform=_Linear(_constant(4.)))
    model.init_weights()
    users = {'head': (model.head, 1.), 'aux 0': (model.aux_losses[0], 2.), 'aux 1': (model.aux_losses[1], 3.),
             'target transform': (model.target_transform, 4.)}
    for name, (user, val) in users.items():
        assert torch.all(user.fc.weight == val) and torch.all(user.fc.bias == -val), name


def _linear_stats(module):
    """(weight std, max |weight|, max |bias|) over the module's Linear layers."""
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    weights = torch.cat([m.weight.detach().flatten() for m in linears])
    biases = torch.cat([m.bias.detach().flatten() for m in linears])
    return float(weights.std()), float(weights.abs().max()), float(biases.abs().max())


@pytest.mark.parametrize('config, user', [
    ('diversepatch/deit-deep-narrow_1xb64_diversepatch_digits.py', 'mmvitreg.PatchMixingLoss'),
    ('_base_/models/drloc_t2t-vit-14.py', 'mmvitreg.DRLoc'),
], ids=['PatchMixingLoss', 'T2T-DRLoc'])
def test_recipe_aux_losses_get_their_trunc_normal_init(config, user):
    """DiversePatch's patch head and the T2T-ViT DRLoc MLP: trunc-normal std 0.02, zero bias after
    init_weights (official _init_weights / apply(_init_weights); PyTorch's default is uniform with bias),
    from their own init_cfg (the classifier's own init_cfg, which a DeiT recipe sweeps over every Linear,
    is left out)."""
    cfg = Config.fromfile(str(CONFIGS / config))
    cfg.model.init_cfg = None
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    aux = next(a for a in model.aux_losses if type(a).__name__ == user.split('.')[-1])
    before = _linear_stats(aux)
    model.init_weights()
    std, peak, bias = _linear_stats(aux)
    print(f'{user} (weight std, max |w|, max |b|): before {tuple(round(v, 4) for v in before)}, '
          f'after init_weights {(round(std, 4), round(peak, 4), round(bias, 4))}')
    assert bias == 0
    assert abs(std - 0.02) < 0.001
