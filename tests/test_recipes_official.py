"""What the official training scripts do, in our recipes (issue 26): every trace user's own
initialisation, the official LR / λ curves, the best and a bounded number of checkpoints in every long
recipe."""

import functools
import math

import pytest
import torch
from conftest import CONFIGS
from mmengine.config import Config
from mmengine.model import BaseModule
from torch import nn

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
    model = TokenClassifier(
        backbone=_Linear(None),
        head=_Linear(_constant(1.0)),
        aux_losses=[_Linear(_constant(2.0)), _Linear(_constant(3.0))],
        target_transform=_Linear(_constant(4.0)),
    )
    model.init_weights()
    users = {
        'head': (model.head, 1.0),
        'aux 0': (model.aux_losses[0], 2.0),
        'aux 1': (model.aux_losses[1], 3.0),
        'target transform': (model.target_transform, 4.0),
    }
    for name, (user, val) in users.items():
        assert torch.all(user.fc.weight == val) and torch.all(user.fc.bias == -val), name


def _linear_stats(module):
    """(weight std, max |weight|, max |bias|) over the module's Linear layers."""
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    weights = torch.cat([m.weight.detach().flatten() for m in linears])
    biases = torch.cat([m.bias.detach().flatten() for m in linears])
    return float(weights.std()), float(weights.abs().max()), float(biases.abs().max())


@pytest.mark.parametrize(
    'config, user',
    [
        ('diversepatch/deit-deep-narrow_1xb64_diversepatch_digits.py', 'mmvitreg.PatchMixingLoss'),
        ('_base_/models/drloc_t2t-vit-14.py', 'mmvitreg.DRLoc'),
    ],
    ids=['PatchMixingLoss', 'T2T-DRLoc'],
)
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
    print(
        f'{user} (weight std, max |w|, max |b|): before {tuple(round(v, 4) for v in before)}, '
        f'after init_weights {(round(std, 4), round(peak, 4), round(bias, 4))}'
    )
    assert bias == 0
    assert abs(std - 0.02) < 0.001


# ---- the official LR and λ curves


def lr_curve(cfg, epoch_length: int) -> list:
    """The LR at the first iteration of every epoch of ``cfg``'s run, stepped as mmengine's runner does
    (schedulers built like ``Runner.build_param_scheduler``: ``end`` defaults to ``max_epochs``;
    by-iteration ones step after each iteration, by-epoch ones after each epoch)."""
    from mmengine.registry import PARAM_SCHEDULERS, DefaultScope

    import mmvitreg.engine  # noqa: F401  (registers mmvitreg.TimmCosineLR)

    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=cfg.optim_wrapper.optimizer.lr)
    schedulers = []
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope', 'mmpretrain')):
        for scheduler in cfg.param_scheduler if isinstance(cfg.param_scheduler, list) else [cfg.param_scheduler]:
            scheduler = dict(scheduler)
            scheduler.setdefault('end', cfg.train_cfg.max_epochs)
            schedulers.append(
                PARAM_SCHEDULERS.build(scheduler, default_args=dict(optimizer=optimizer, epoch_length=epoch_length))
            )
    curve = []
    for _ in range(cfg.train_cfg.max_epochs):
        curve.append(optimizer.param_groups[0]['lr'])
        for _ in range(epoch_length):
            optimizer.step()
            [s.step() for s in schedulers if not s.by_epoch]
        [s.step() for s in schedulers if s.by_epoch]
    return curve


def timm_cosine(t, total, warmup, lr, warmup_lr, min_lr):
    """timm's CosineLRScheduler._get_lr (warmup_prefix=False, one cycle; the official scripts' scheduler):
    linear warm-up from warmup_lr for ``warmup`` steps, else the cosine laid over ``[0, total)``."""
    if t < warmup:
        return warmup_lr + t * (lr - warmup_lr) / warmup
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * t / total))


def drloc_weight(init_weight, epoch, warmup_epochs=20, total_epoch=300):
    """Official VTs-Drloc main.py _weight_decay (λ of epoch ``epoch``)."""
    if epoch <= warmup_epochs:
        return min(init_weight / warmup_epochs * epoch, init_weight)
    return init_weight * (1.0 - (epoch - warmup_epochs) / (total_epoch - warmup_epochs))


#: every DRLoc model kind (from scratch and ImageNet-pre-trained) at both lengths (one data set each:
#: the schedule does not depend on it)
DRLOC_RECIPES = sorted(
    c for c in (CONFIGS / 'drloc').glob('*_8xb128-*.py') if c.stem.endswith(('cifar10', '300e_imagenet100'))
)


@pytest.mark.parametrize('epochs', [100, 300], ids=['100e', '300e'])
def test_drloc_lr_and_lambda_equal_the_official_curves(epochs):
    """Every DRLoc recipe's per-epoch LR equals the official one (timm's CosineLRScheduler per iteration,
    t_initial = 300 epochs, 20 warm-up epochs from 1e-6, min 1e-5; VTs-Drloc lr_scheduler.py) over its
    whole run (101 epochs: official main.py's range(101); 300 for the Table 3 right column), and its λ
    the official _weight_decay. The official scheduler is set after each step, so its iteration k runs
    with the LR of k - 1: one iteration late, not compared."""
    from mmvitreg.engine.hooks import DRLocWeightScheduleHook

    configs = [c for c in DRLOC_RECIPES if f'-{epochs}e_' in c.name]
    assert configs
    signatures = {}
    for config in configs:  # every recipe of this length shares one schedule
        cfg = Config.fromfile(str(config))
        signatures[
            repr((cfg.param_scheduler, cfg.train_cfg.max_epochs, cfg.custom_hooks, cfg.optim_wrapper.optimizer.lr))
        ] = cfg
    assert len(signatures) == 1, [c.name for c in configs]
    n = 48  # CIFAR at 8 x 128 with drop_last (official); the curve per epoch does not depend on it
    lr = lr_curve(cfg, n)
    official = [timm_cosine(e * n, 300 * n, 20 * n, 1e-3, 1e-6, 1e-5) for e in range(len(lr))]
    assert len(lr) == (101 if epochs == 100 else 300)
    print('epoch  LR/peak here  official')
    for e in (0, 1, 10, 20, 21, 50, 80, 100, len(lr) - 1):
        print(f'{e:5d}  {lr[e] / 1e-3:12.4f}  {official[e] / 1e-3:8.4f}')
    assert max(abs(a - b) / b for a, b in zip(lr, official)) < 1e-9
    hook_cfg = next(h for h in cfg.custom_hooks if h['type'] == 'mmvitreg.DRLocWeightScheduleHook')
    hook = DRLocWeightScheduleHook(**{k: v for k, v in hook_cfg.items() if k != 'type'})
    assert [hook.factor(e) for e in range(len(lr))] == pytest.approx(
        [drloc_weight(1.0, e) for e in range(len(lr))], abs=1e-12
    )


@pytest.mark.parametrize(
    'config, epochs, min_lr',
    [
        ('tlalign/deit-small_8xb128_cutmix-tlalign_in1k.py', 300, 1e-5),
        ('diversepatch/deit-small12_4xb256-400e_diversepatch_in1k.py', 400, 1e-7),
    ],
    ids=['TL-Align', 'DiversePatch'],
)
def test_deit_codebase_lr_equals_the_official_per_epoch_curve(config, epochs, min_lr):
    """TL-Align (train_deit_small_tla.sh) and DiversePatch (deit/main.py) run DeiT's loop: timm's scheduler
    stepped after each epoch with t_in_epochs, so epoch e trains with the value of e - 1 (epochs 0-1 at 1e-6,
    epoch 5 at 8.0e-4); 5 warm-up epochs from 1e-6, the cosine laid over all epochs, lr 5e-4 x 1024 / 512."""
    cfg = Config.fromfile(str(CONFIGS / config))
    lr = lr_curve(cfg, epoch_length=3)
    official = [1e-6] + [timm_cosine(e, epochs, 5, 1e-3, 1e-6, min_lr) for e in range(epochs - 1)]
    print('epoch  LR here     official')
    for e in (0, 1, 2, 5, 6, 100, epochs - 1):
        print(f'{e:5d}  {lr[e]:.4e}  {official[e]:.4e}')
    assert len(lr) == epochs and max(abs(a - b) / b for a, b in zip(lr, official)) < 1e-9
    assert lr[0] == lr[1] == pytest.approx(1e-6) and lr[5] == pytest.approx(8.0e-4, rel=1e-3)


def two_group_optimizer():
    """SGD of lr 1e-3 with a second group of ``lr_mult=0.1`` (mmengine's optimizer constructor)."""
    from mmengine.optim import DefaultOptimWrapperConstructor

    return DefaultOptimWrapperConstructor(
        dict(optimizer=dict(type='SGD', lr=1e-3)), paramwise_cfg=dict(custom_keys={'1.': dict(lr_mult=0.1)})
    )(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)))


def timm_cosine_lrs(steps: int = 20, **kwargs) -> list:
    """``[[lr of each group] per step]`` of ``TimmCosineLR(**kwargs)`` on :func:`two_group_optimizer`."""
    from mmvitreg.engine import TimmCosineLR

    wrapper = two_group_optimizer()
    scheduler, lrs = TimmCosineLR(wrapper, by_epoch=False, **kwargs), []
    for _ in range(steps):
        lrs.append([group['lr'] for group in wrapper.optimizer.param_groups])
        wrapper.step()
        scheduler.step()
    return lrs


def test_timm_cosine_warms_every_lr_mult_group_from_the_absolute_warmup_lr():
    """timm 1.0's CosineLRScheduler gives every parameter group the same warm-up start, ``warmup_lr_init``, and its
    own slope ``(base - warmup_lr_init) / W`` (its ``warmup_steps``), then the cosine from the group's base LR to the
    absolute ``lr_min``: a group of ``lr_mult=0.1`` follows ``timm_cosine`` with its own base LR at every step."""
    bases = [group['lr'] for group in two_group_optimizer().optimizer.param_groups]
    assert sorted(set(bases)) == [1e-4, 1e-3]
    lrs = timm_cosine_lrs(T_max=20, warmup=5, warmup_lr_init=1e-6, eta_min=1e-5)
    for t, step in enumerate(lrs):
        assert step == pytest.approx([timm_cosine(t, 20, 5, base, 1e-6, 1e-5) for base in bases], rel=1e-12), t
    assert set(lrs[0]) == {1e-6} and len(set(lrs[3])) == 2  # one start for both groups, then two curves


def test_timm_cosine_equals_timms_own_scheduler_per_group():
    """The same, against timm's ``CosineLRScheduler`` itself (stepped per update, as the DRLoc code does)."""
    scheduler = pytest.importorskip('timm.scheduler')
    wrapper = two_group_optimizer()
    timm_lr = scheduler.CosineLRScheduler(
        wrapper.optimizer, t_initial=20, lr_min=1e-5, warmup_t=5, warmup_lr_init=1e-6, t_in_epochs=False
    )
    official = []
    for t in range(20):
        timm_lr.step_update(t)
        official.append([group['lr'] for group in wrapper.optimizer.param_groups])
    ours = timm_cosine_lrs(T_max=20, warmup=5, warmup_lr_init=1e-6, eta_min=1e-5)
    for t, (step, timm_step) in enumerate(zip(ours, official)):
        assert step == pytest.approx(timm_step, rel=1e-12), t


def test_timm_cosine_rejects_a_warmup_as_long_as_the_cosine():
    from mmvitreg.engine import TimmCosineLR

    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match='0 <= warmup < T_max'):
        TimmCosineLR(optimizer, T_max=5, warmup=5)


# ---- checkpoints of long runs


def test_every_long_config_bounds_its_checkpoints_and_saves_the_best(monkeypatch):
    """Every config of >= 30 epochs or >= 40k iterations (read from the configs themselves, all of them: the
    ImageNet recipes, the 30-epoch fine-tunes and digits demos, the 3x Cascade and 80k / 160k UperNet configs)
    keeps a bounded number of checkpoints and saves the best one (the libraries' runtimes keep every one: ~80 GB
    for 300 epochs of DeiT-S with the optimizer, 10 of a 160k UperNet, and no best)."""
    import mmengine.config.utils as config_utils

    # mmengine re-reads all of mmpretrain's metafiles for each `mmpretrain::` path it resolves: once is enough
    monkeypatch.setattr(config_utils, 'load', functools.lru_cache(maxsize=None)(config_utils.load))
    long_runs, unbounded = [], []
    for path in sorted(p for p in CONFIGS.rglob('*.py') if '_base_' not in p.parts):
        cfg = Config.fromfile(str(path))
        loop = cfg.get('train_cfg') or {}
        if loop.get('max_epochs', 0) < 30 and loop.get('max_iters', 0) < 40_000:
            continue
        long_runs.append(path.name)
        hook = cfg.default_hooks.checkpoint
        if not (0 < hook.get('max_keep_ckpts', -1) <= 5 and hook.get('save_best')):
            unbounded.append(path.name)
    print(f'{len(long_runs)} configs of >= 30 epochs or >= 40k iterations')
    assert len(long_runs) >= 150 and not unbounded, unbounded
