"""Mixed precision on the device: three training steps of every digits classifier config in bf16 and in fp16
(mmengine's AmpOptimWrapper, fp16 with its dynamic loss scale) log finite losses and leave finite float32 weights.
A CPU dry run covers bf16 (mmvitreg's AutocastOptimWrapper; float16 autocast needs a GPU)."""

import math

import pytest
import torch
from device_helpers import DEVICE, DIGITS_CLASSIFIERS, amp_steps, load_digits_config, needs_device
from guard_helpers import build_workspace

pytestmark = needs_device


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('cuda_amp_ws'))


@pytest.mark.parametrize('amp', ['bf16', 'fp16'])
@pytest.mark.parametrize('config', DIGITS_CLASSIFIERS, ids=lambda p: p.stem)
def test_three_mixed_precision_steps_are_finite(ws, config, amp):
    if amp == 'fp16' and not DEVICE.startswith('cuda'):
        pytest.skip('float16 autocast needs a GPU (a CPU trains mixed precision in bfloat16)')
    logs, params = amp_steps(load_digits_config(config, ws), DEVICE, amp)
    assert len(logs) == 3 and all(any(k.startswith('loss') for k in log) for log in logs)
    assert all(math.isfinite(v) for log in logs for v in log.values()), logs
    assert all(p.dtype == torch.float32 and bool(torch.isfinite(p).all()) for p in params.values())
