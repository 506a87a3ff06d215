"""CPU vs. CUDA: the same weights, images, seed and random draws give the same eval logits and the same value of
every named loss (and logged scalar) of every digits classifier config (each technique's), in float32 without
TF32, with dropout and drop path off (``device_helpers.compare_devices``; its dry run on the CPU is
tests/test_device_helpers.py)."""

import math

import pytest
from device_helpers import DEVICE, DIGITS_CLASSIFIERS, RTOL, compare_devices, load_digits_config, needs_device
from guard_helpers import build_workspace

pytestmark = needs_device


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('cuda_equality_ws'))


@pytest.mark.parametrize('config', DIGITS_CLASSIFIERS, ids=lambda p: p.stem)
def test_logits_and_every_loss_agree_between_cpu_and_device(ws, config):
    diffs = compare_devices(load_digits_config(config, ws), 'cpu', DEVICE)
    print({name: f'{d:.2g}' for name, d in diffs.items()})
    assert 'logits' in diffs and any(name.startswith('loss') for name in diffs)
    assert all(math.isfinite(d) for d in diffs.values()), diffs
    worst = max(diffs, key=diffs.get)
    assert diffs[worst] <= RTOL, f'{worst} differs by {diffs[worst]:.3g} (relative) between cpu and {DEVICE}'
