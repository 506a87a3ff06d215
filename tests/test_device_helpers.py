"""The dry run of tests/cuda on the CPU (issue 30, item 4): the device comparison and the mixed-precision steps
that the GPU tests run, with the CPU on both sides, so that those tests are known to work up to the device."""

import math

import pytest
import torch
from device_helpers import (
    DIGITS_CLASSIFIERS,
    HostRandom,
    amp_steps,
    build_model_and_batch,
    compare_devices,
    load_digits_config,
    outputs_on,
)
from guard_helpers import TECHNIQUES, build_workspace

# the named outputs each technique's training forward must bring to the comparison (besides loss_cls / loss and
# the eval logits)
EXPECTED = {
    'lvvit-tiny_1xb64_tl_digits': {'loss_token'},
    'deit-tiny_1xb64_cutmix-tlalign_digits': {'tla_shift'},
    'swin-nano_1xb64_cutmix-tlalign_digits': {'tla_shift'},
    'deit-tiny_1xb64_drloc_digits': {'loss_drloc'},
}


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('device_helpers_ws'))


@pytest.mark.parametrize('config', DIGITS_CLASSIFIERS, ids=lambda p: p.stem)
def test_compare_devices_cpu_against_cpu_is_exact_and_covers_every_loss(ws, config):
    diffs = compare_devices(load_digits_config(config, ws), 'cpu', 'cpu')
    assert {'logits'} | EXPECTED.get(config.stem, set()) <= set(diffs)
    assert any(name.startswith('loss') for name in diffs)
    assert all(d == 0 for d in diffs.values()), diffs


def test_the_comparison_sees_a_changed_weight(ws):
    model, batch = build_model_and_batch(load_digits_config(TECHNIQUES[0], ws))
    before = outputs_on(model, batch, 'cpu')
    with torch.no_grad():
        list(model.head.parameters())[-1][0].add_(0.1)  # the bias of one class (LayerNorm-ed features sum to 0)
    after = outputs_on(model, batch, 'cpu')
    losses = [name for name in before if name.startswith('loss')]
    assert losses and not torch.equal(before['logits'], after['logits'])
    assert all(not torch.equal(before[name], after[name]) for name in losses)


def test_dropout_and_drop_path_are_off(ws):
    model, _ = build_model_and_batch(load_digits_config(TECHNIQUES[0], ws))
    drop_paths = [m for m in model.modules() if type(m).__name__ == 'DropPath']
    assert drop_paths and all(m.drop_prob == 0 for m in drop_paths)
    assert all(m.p == 0 for m in model.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd))


def test_host_random_draws_an_accelerator_tensor_from_the_cpu_generator():
    """A draw asked for on another device ('meta' stands in for CUDA here) comes from the CPU generator: the
    next CPU draw is the one after it."""
    torch.manual_seed(0)
    expected = torch.randperm(10), torch.randperm(10)
    torch.manual_seed(0)
    with HostRandom():
        drawn = torch.randperm(10, device='meta')
        following = torch.randperm(10)
    assert drawn.device.type == 'meta' and torch.equal(following, expected[1])


@pytest.mark.parametrize('config', TECHNIQUES[:2], ids=lambda p: p.stem)
def test_bf16_steps_on_the_cpu_are_finite(ws, config):
    logs, params = amp_steps(load_digits_config(config, ws), 'cpu', 'bf16')
    assert len(logs) == 3 and all(math.isfinite(v) for log in logs for v in log.values())
    assert all(p.dtype == torch.float32 and bool(torch.isfinite(p).all()) for p in params.values())
