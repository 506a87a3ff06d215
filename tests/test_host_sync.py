"""No host synchronisation inside a training step: on a GPU, reading a tensor's value on the host (``.item()``,
``float(t)``, ``bool(t)``, ``.tolist()``), or an operator whose output shape depends on the values (``nonzero``,
boolean indexing, ``unique``, ``masked_select``), waits for every kernel queued before it and stalls the launch
queue. Each technique's digits config runs a training step (data preprocessing, forward, every loss, the backward)
under an audit that records every such call with the line of the package that made it; there must be none.

The audit runs on the CPU, where the same calls dispatch to the same operators, so it needs no GPU. The
optimizer's step is left out: PyTorch keeps its step counters on the host on purpose.
"""

import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CONFIGS
from mmengine.config import Config
from mmengine.optim import OptimWrapper
from mmengine.registry import DefaultScope
from studies.train_step_benchmark import classification_batch, token_label_batch
from torch.utils._python_dispatch import TorchDispatchMode

#: operators that read a value on the host or whose output shape depends on the values
SYNCING = {
    '_local_scalar_dense',
    'item',
    'is_nonzero',
    'nonzero',
    'unique',
    '_unique',
    '_unique2',
    'unique_dim',
    'unique_consecutive',
    'masked_select',
    'equal',
}
PACKAGE = str(Path(__file__).resolve().parents[1] / 'mmvitreg')


def _call_site() -> str:
    """The innermost line of mmvitreg's code on the stack (else the innermost line outside torch)."""
    frames = traceback.extract_stack()[:-3]
    ours = [f for f in frames if f.filename.startswith(PACKAGE)]
    frame = (ours or [f for f in frames if '/torch/' not in f.filename] or frames)[-1]
    return f'{Path(frame.filename).name}:{frame.lineno} {frame.line}'


class HostSyncAudit(TorchDispatchMode):
    """Records ``(operator, call site)`` of every host-synchronising call while active."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
        boolean_index = name in ('index', 'index_put', 'index_put_') and any(
            isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in indices
        )
        if name in SYNCING or boolean_index:
            self.calls.append((name, _call_site()))
        return func(*args, **(kwargs or {}))


class _Paused:
    """The optimizer step, outside the audit."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def __getattr__(self, name):
        return getattr(self.optimizer, name)

    def step(self, *args, **kwargs):
        with torch.utils._python_dispatch._disable_current_modes():
            return self.optimizer.step(*args, **kwargs)


def audited_step(model, data) -> list:
    """One warm-up training step, then one under :class:`HostSyncAudit`; the calls it recorded."""
    audit = HostSyncAudit()
    optim = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-4))
    model.train_step(data, optim)
    optim.optimizer = _Paused(optim.optimizer)
    with audit:
        model.train_step(data, optim)
    return audit.calls


CASES = {
    'deit (plain)': ('demo/deit-tiny_1xb64_digits.py', classification_batch),
    'swin + mixtoken': ('demo/swin-nano_1xb64_mixtoken_digits.py', classification_batch),
    'deit + tl-align': ('tlalign/deit-tiny_1xb64_cutmix-tlalign_digits.py', classification_batch),
    'swin + tl-align': ('tlalign/swin-nano_1xb64_cutmix-tlalign_digits.py', classification_batch),
    'lv-vit + token labeling': ('lvvit/lvvit-tiny_1xb64_tl_digits.py', token_label_batch),
    'deepvit': ('deepvit/deepvit-tiny_1xb64_digits.py', classification_batch),
    'diversepatch': ('diversepatch/deit-deep-narrow_1xb64_diversepatch_digits.py', classification_batch),
    'deit + drloc': ('drloc/deit-tiny_1xb64_drloc_digits.py', classification_batch),
    'swin + drloc': ('drloc/swin-nano_1xb64_drloc_digits.py', classification_batch),
    'cvt + drloc': ('drloc/cvt-tiny_1xb64_drloc_digits.py', classification_batch),
}


@pytest.mark.parametrize('case', CASES)
def test_a_training_step_never_waits_for_the_device(case):
    config, make_batch = CASES[case]
    cfg = Config.fromfile(CONFIGS / config)
    torch.manual_seed(0)
    np.random.seed(0)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        from mmengine.registry import MODELS

        model_cfg = cfg.model.copy()
        model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
        model = MODELS.build(model_cfg)
        model.init_weights()
        size = cfg.model.backbone.get('img_size', 32)
        kwargs = dict(patch_size=cfg.patch_size, map_size=8) if make_batch is token_label_batch else {}
        data = make_batch(4, size, cfg.model.head.num_classes, **kwargs)
        calls = audited_step(model.train(), data)
    assert not calls, 'host synchronisations in the step:\n' + '\n'.join(f'{op}: {site}' for op, site in calls)


def test_the_audit_sees_every_kind_of_host_sync():
    """The audit is no check that cannot fail: each kind of call it looks for is recorded."""
    x = torch.rand(6)
    with HostSyncAudit() as audit:
        x.sum().item()
        float(x.max())
        bool(x[0] > 0)
        x[x > 0.5]
        x.nonzero()
        torch.unique(x)
    ops = [op for op, _ in audit.calls]
    assert ops.count('_local_scalar_dense') + ops.count('item') + ops.count('is_nonzero') >= 3
    assert {'nonzero', 'index'} <= set(ops) and any('unique' in op for op in ops)
