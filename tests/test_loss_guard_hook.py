"""LossGuardHook: a non-finite loss stops the run with the iteration, the term and a hint; the hint names drop
path first when the model's stochastic-depth rate is large (issue 35.4: drop_path_rate=0.9 going NaN)."""

from types import SimpleNamespace

import pytest
import torch
from mmcv.cnn.bricks import DropPath
from torch import nn

from mmvitreg.engine.hooks import LossGuardHook, NonFiniteLossError


def runner_with_drop_path(*rates):
    """A runner at iteration 7 of epoch 2 whose model holds ``DropPath`` modules of ``rates``."""
    model = nn.Sequential(nn.Linear(2, 2), *(DropPath(rate) for rate in rates))
    return SimpleNamespace(model=model, iter=6, epoch=1)


@pytest.mark.parametrize('rates', [(0.0, 0.45, 0.9), (0.5,)])
def test_nan_hint_names_drop_path_when_the_rate_is_large(rates):
    with pytest.raises(
        NonFiniteLossError,
        match=r'iteration 7 \(epoch 2\): loss_token = nan.*'
        rf'drops residual branches with rates up to {max(rates):g}.*drop_path_rate.*clip_grad',
    ):
        LossGuardHook().after_train_iter(
            runner_with_drop_path(*rates),
            0,
            outputs=dict(
                loss=torch.tensor(float('nan')), loss_cls=torch.tensor(1.0), loss_token=torch.tensor(float('nan'))
            ),
        )


@pytest.mark.parametrize('rates', [(), (0.1, 0.3)])
def test_nan_hint_leaves_drop_path_out_when_the_rate_is_small(rates):
    with pytest.raises(NonFiniteLossError, match=r'iteration 7 \(epoch 2\): loss = inf') as error:
        LossGuardHook().after_train_iter(
            runner_with_drop_path(*rates), 0, outputs=dict(loss=torch.tensor(float('inf')))
        )
    assert 'drop_path_rate' not in str(error.value) and 'lower the learning rate' in str(error.value)


def test_finite_losses_pass():
    LossGuardHook().after_train_iter(runner_with_drop_path(0.9), 0, outputs=dict(loss=torch.tensor(2.0)))
