"""Mixed precision (issue 14, part 4): `tools/train.py --amp` trains every technique's digits config for
20 iterations on CPU in bfloat16 with finite losses, and the loss terms that need float32 (softmax over
classes, logs, cosine similarities) compute in float32 under autocast. (CUDA float16 / bfloat16 take the
same wrapper with a GradScaler for float16; this machine has no GPU to run them.)"""

import math

import pytest
import torch
from guard_helpers import TECHNIQUES, build_workspace, logged_losses, train
from mmengine.config import Config
from mmengine.registry import DefaultScope
from torch.utils._python_dispatch import TorchDispatchMode

from mmvitreg.engine import AutocastOptimWrapper

ITERS = 20


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('amp_ws'))


@pytest.mark.parametrize('config', TECHNIQUES, ids=lambda p: p.stem)
def test_amp_on_cpu_trains_20_iterations_in_bfloat16_with_finite_losses(ws, config):
    work = ws / f'amp_{config.stem}'
    train(
        config,
        ws,
        work,
        '--amp',
        '--no-validate',
        **{'train_dataloader.batch_size': 4, 'train_dataloader.dataset.indices': 4 * ITERS, 'train_cfg.max_epochs': 1},
    )
    built = Config.fromfile(str(next(work.glob('*/vis_data/config.py'))))
    assert built.optim_wrapper.type == 'mmvitreg.AutocastOptimWrapper'
    log = next(work.glob('*/*.log')).read_text()
    assert log.count('mixed precision on a CPU: the model trains under torch.autocast in bfloat16') == 1
    steps = logged_losses(work)
    assert len(steps) == ITERS
    assert all(math.isfinite(v) for s in steps for k, v in s.items() if k.startswith('loss'))
    weights = torch.load(work / 'epoch_1.pth', map_location='cpu', weights_only=False)['state_dict']
    assert all(v.dtype != torch.bfloat16 for v in weights.values())  # master weights stay float32


class DtypeRecorder(TorchDispatchMode):
    """Records the input dtype of the ops that need float32 in a loss, as dispatched after autocast."""

    WATCHED = ('_softmax', '_log_softmax', 'log', 'log1p', 'xlogy', 'cosine_similarity', 'nll_loss')

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split('.')[0]
        if name in self.WATCHED:
            self.seen.append((name, args[0].dtype))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize('config', TECHNIQUES, ids=lambda p: p.stem)
def test_loss_terms_compute_in_float32_under_bfloat16_autocast(ws, config):
    """Under the --amp wrapper the backbone runs in bfloat16, and every softmax / log / cosine inside the
    head's and the auxiliary losses sees float32 inputs."""
    from mmpretrain.registry import MODELS
    from mmpretrain.structures import DataSample

    cfg = Config.fromfile(str(config))
    model_cfg = cfg.model.copy()
    model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(model_cfg)
    size = cfg.model.backbone.img_size
    grid = size // cfg.model.backbone.get('patch_size', 4)
    samples = []
    for i in range(4):
        s = DataSample().set_gt_label(i)
        if 'LoadTokenLabelMap' in str(cfg.train_pipeline):
            classes = torch.arange(5.0).view(5, 1, 1).expand(5, grid, grid)
            s.set_field(torch.stack([torch.full((5, grid, grid), 0.2), classes]), 'token_label')
        samples.append(s)
    batch = model.data_preprocessor(
        dict(
            inputs=[torch.randint(0, 255, (3, size, size), dtype=torch.uint8) for _ in range(4)], data_samples=samples
        ),
        True,
    )

    users = [model.head] + list(getattr(model, 'aux_losses', []))
    recorder = DtypeRecorder()
    for user in users:
        loss = user.loss

        def recorded(*args, _loss=loss, **kwargs):
            with recorder:
                return _loss(*args, **kwargs)

        user.loss = recorded
    wrapper = AutocastOptimWrapper(optimizer=torch.optim.SGD(model.parameters(), lr=0.1), device_type='cpu')
    linear_dtypes = []
    for module in model.backbone.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, i, out: linear_dtypes.append(out.dtype))
    with wrapper.optim_context(model):
        losses = model(**batch, mode='loss')
    assert linear_dtypes and set(linear_dtypes) == {torch.bfloat16}  # the backbone does run in bfloat16
    assert all(torch.isfinite(v).all() for v in losses.values())
    assert recorder.seen, 'no softmax / log in the losses: the recorder watches the wrong ops'
    assert all(dtype == torch.float32 for _, dtype in recorder.seen), recorder.seen


def test_autocast_wrapper_dtype_rules():
    params = [torch.nn.Parameter(torch.ones(2))]
    cpu = AutocastOptimWrapper(optimizer=torch.optim.SGD(params, lr=0.1), device_type='cpu')
    assert cpu.cast_dtype == torch.bfloat16 and cpu.loss_scaler is None
    with pytest.raises(ValueError, match='mixed precision on a CPU runs in bfloat16 only'):
        AutocastOptimWrapper(optimizer=torch.optim.SGD(params, lr=0.1), device_type='cpu', dtype='float16')
    with pytest.raises(ValueError, match='dtype must be one of'):
        AutocastOptimWrapper(optimizer=torch.optim.SGD(params, lr=0.1), dtype='float64')
    linear = torch.nn.Linear(4, 4)
    wrapper = AutocastOptimWrapper(optimizer=torch.optim.SGD(linear.parameters(), lr=0.1), device_type='cpu')
    with wrapper.optim_context(linear):
        out = linear(torch.ones(2, 4))
    assert out.dtype == torch.bfloat16
    wrapper.update_params(out.float().sum())
    assert linear.weight.dtype == torch.float32 and 'state' in wrapper.state_dict()
