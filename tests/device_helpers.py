"""Device-generic checks behind ``tests/cuda`` (issue 30, item 4), written so that what runs there on a GPU runs
here on the CPU first: ``compare_devices(config, 'cpu', 'cpu')`` is the dry run of ``compare_devices(config,
'cpu', 'cuda')``, and ``MMVITREG_TEST_DEVICE=cpu pytest tests/cuda`` runs the whole GPU suite on the CPU.

The model and the batch of a digits config are built as ``tools/train.py`` builds them (the config pointed at
the small workspace of :func:`guard_helpers.build_workspace`, the runner's data loader, ``init_weights``), with
dropout and drop path off so that a training forward is a function of the weights, the batch and the random
draws alone.
"""

import copy
import os
import random
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import pytest
import torch
from conftest import CONFIGS
from guard_helpers import run_options
from mmengine.config import Config, DictAction
from mmengine.registry import DefaultScope
from torch import nn
from torch.overrides import TorchFunctionMode

# cuBLAS is deterministic (as mmengine's randomness.deterministic=True demands through
# torch.use_deterministic_algorithms) only with a fixed workspace, read when its first handle is made: set when the
# GPU tests are collected, before any of them runs (tools/gpu_check.sh exports it too)
os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')

#: the device the tests of ``tests/cuda`` run on: ``cuda`` (the default), or ``cpu`` for a dry run
DEVICE = os.environ.get('MMVITREG_TEST_DEVICE', 'cuda')
NO_CUDA = (
    'no CUDA device is visible (torch.cuda.is_available() is False); MMVITREG_TEST_DEVICE=cpu runs these '
    'tests on the CPU as a dry run'
)
#: mark of every test of ``tests/cuda``: skipped, with the reason, where its device is absent
needs_device = pytest.mark.skipif(DEVICE.startswith('cuda') and not torch.cuda.is_available(), reason=NO_CUDA)
#: every classifier trained on the bundled digits (``configs/<technique>/*_digits.py``: each technique's, the demos,
#: DRLoc on each backbone; not the teacher, segmentation or detection configs)
DIGITS_CLASSIFIERS = sorted(CONFIGS.glob('*/*_digits.py'))
#: relative tolerance of a CPU-vs-CUDA comparison in float32 without TF32 (the issue measured <= 1.5e-6 on the
#: full-size models; tiny models sum less)
RTOL = 1e-4


def load_digits_config(config: Path, ws: Path, batch_size: int = 8) -> Config:
    """``config`` with the ``--cfg-options`` of :func:`guard_helpers.run_options` (the workspace's data, no
    loader workers, seed 0), merged as ``tools/train.py`` merges them, and a training batch of ``batch_size``."""
    cfg = Config.fromfile(str(config))
    options = dict(item.split('=', 1) for item in run_options(config, ws, ws / 'device_check')[1:])
    cfg.merge_from_dict({key: DictAction._parse_iterable(value) for key, value in options.items()})
    cfg.train_dataloader.batch_size = batch_size
    return cfg


def build_model_and_batch(cfg: Config) -> Tuple[nn.Module, dict]:
    """The config's model (seed 0, ``init_weights``, SyncBN reverted, dropout and drop path off) on the CPU and
    the first batch of its training data loader."""
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import MODELS
    from mmengine.runner import Runner

    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        batch = next(iter(Runner.build_dataloader(cfg.train_dataloader, seed=0)))
        model_cfg = cfg.model.copy()
        model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
        torch.manual_seed(0)
        model = revert_sync_batchnorm(MODELS.build(model_cfg))
        model.init_weights()
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.p = 0.0
        if type(module).__name__ == 'DropPath' and hasattr(module, 'drop_prob'):
            module.drop_prob = 0.0
    return model, batch


class HostRandom(TorchFunctionMode):
    """Draws the random tensors that code asks for on an accelerator from the CPU generator, then moves them
    there: both devices of a comparison see the same draws (e.g. DRLoc's pairs, a permuted mixing partner), so
    that the comparison is of the arithmetic, not of two generators."""

    FACTORIES = frozenset([torch.rand, torch.randn, torch.randint, torch.randperm])

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        device = kwargs.get('device')
        if func in self.FACTORIES and device is not None and torch.device(device).type != 'cpu':
            kwargs['device'] = 'cpu'
            return func(*args, **kwargs).to(device)
        return func(*args, **kwargs)


def seed_everything(seed: int = 0) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@contextmanager
def full_float32():
    """float32 matrix products in full precision (TF32 off on CUDA) for the duration."""
    saved = (
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    torch.set_float32_matmul_precision('highest')
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[1:]


def _flat(name: str, value) -> Dict[str, torch.Tensor]:
    """``{name: tensor}`` of a tensor, or of each tensor of a list / tuple (``name.i``)."""
    if isinstance(value, torch.Tensor):
        return {name: value.detach().double().cpu()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in _flat(f'{name}.{i}', item).items()}
    return {}


def outputs_on(model: nn.Module, batch: dict, device: str) -> Dict[str, torch.Tensor]:
    """A copy of ``model`` on ``device``: every named output of one training forward (``model(mode='loss')``: the
    losses and logged scalars, e.g. ``loss_cls``, ``loss_token``, ``tla_shift``) after seeding python, numpy and
    torch with 0, and the eval logits (``mode='tensor'``, ``logits``) of the same images; float64 on the CPU."""
    model = copy.deepcopy(model).to(device)
    out = {}
    with full_float32(), ExitStack() as stack:
        stack.enter_context(HostRandom())
        seed_everything(0)
        model.train()
        losses = model(**model.data_preprocessor(copy.deepcopy(batch), True), mode='loss')
        for name, value in losses.items():
            out.update(_flat(name, value))
        model.eval()
        with torch.no_grad():
            out.update(_flat('logits', model(**model.data_preprocessor(copy.deepcopy(batch), False), mode='tensor')))
    return out


def compare_devices(cfg: Config, device_a: str, device_b: str) -> Dict[str, float]:
    """``{output name: relative difference}`` between ``device_a`` and ``device_b`` (see :func:`outputs_on`) for
    the model and batch of ``cfg``: ``max |a - b| / max |a|`` per output (``max |a|`` at least 1e-6)."""
    model, batch = build_model_and_batch(cfg)
    a, b = outputs_on(model, batch, device_a), outputs_on(model, batch, device_b)
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return {name: float((a[name] - b[name]).abs().max() / a[name].abs().max().clamp_min(1e-6)) for name in a}


def amp_steps(cfg: Config, device: str, amp: str, steps: int = 3) -> Tuple[list, dict]:
    """The logged values of ``steps`` training steps of the config's model on ``device`` in the optim wrapper of
    ``amp`` (``'bf16'`` / ``'fp16'``: mmengine's ``AmpOptimWrapper`` on CUDA; see
    ``studies.train_step_benchmark.build_optim_wrapper``), then its weights: ``(logs, {name: parameter})``."""
    from studies.train_step_benchmark import build_optim_wrapper

    model, batch = build_model_and_batch(cfg)
    model = model.to(device).train()
    optim_wrapper = build_optim_wrapper(model, device, amp)
    seed_everything(0)
    logs = [
        {k: float(v.detach()) for k, v in model.train_step(copy.deepcopy(batch), optim_wrapper).items()}
        for _ in range(steps)
    ]
    return logs, dict(model.named_parameters())
