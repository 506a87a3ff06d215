"""Exact resume (issue 14, part 2): N iterations, stop, --resume to 2N gives the weights, optimizer state
and logged losses of 2N iterations straight, bit for bit on CPU with deterministic settings - for the
LV-ViT token-labeling digits config with MixToken (its random boxes are part of the state) and for the
DeepViT digits config (Mixup/CutMix, drop path, re-attention BatchNorm). Validation runs after every
epoch, so the straight run validates at N and the resumed one does not: training draws must not
depend on it."""

import numpy as np
import pytest
import torch
from guard_helpers import TECHNIQUES, build_workspace, logged_losses, train

N_EPOCHS, ITERS_PER_EPOCH = 1, 4  # N = 4 iterations
OPTIONS = {
    'train_dataloader.batch_size': 8,
    'train_dataloader.dataset.indices': 8 * ITERS_PER_EPOCH,
    'train_cfg.val_interval': 1,
}


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('resume_ws'))


def flat(state, prefix=''):
    """Every tensor / number of a nested state dict, by dotted path."""
    out = {}
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else None
    if items is None:
        return {prefix: state}
    for k, v in items:
        out.update(flat(v, f'{prefix}{k}.'))
    return out


def assert_identical(a: dict, b: dict, what: str):
    a, b = flat(a), flat(b)
    assert a.keys() == b.keys(), what
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), f'{what}: {key} differs'
        elif isinstance(a[key], np.ndarray):
            assert np.array_equal(a[key], b[key]), f'{what}: {key} differs'
        else:
            assert a[key] == b[key], f'{what}: {key} differs ({a[key]} vs {b[key]})'


@pytest.mark.parametrize('config', TECHNIQUES[:2], ids=lambda p: p.stem)
def test_n_then_resume_to_2n_equals_2n_straight(ws, config):
    straight, resumed = ws / f'straight_{config.stem}', ws / f'resumed_{config.stem}'
    train(config, ws, straight, **OPTIONS, **{'train_cfg.max_epochs': 2 * N_EPOCHS})
    train(config, ws, resumed, **OPTIONS, **{'train_cfg.max_epochs': N_EPOCHS})
    train(config, ws, resumed, '--resume', **OPTIONS, **{'train_cfg.max_epochs': 2 * N_EPOCHS})

    a = torch.load(straight / 'epoch_2.pth', map_location='cpu', weights_only=False)
    b = torch.load(resumed / 'epoch_2.pth', map_location='cpu', weights_only=False)
    assert a['meta']['iter'] == b['meta']['iter'] == 2 * ITERS_PER_EPOCH
    assert_identical(a['state_dict'], b['state_dict'], 'weights')
    assert_identical(a['optimizer'], b['optimizer'], 'optimizer state')
    assert_identical(a['param_schedulers'], b['param_schedulers'], 'schedulers')
    assert_identical(a['rng_state'], b['rng_state'], 'random generators')

    losses_straight = logged_losses(straight)
    losses_resumed = logged_losses(resumed, all_runs=True)
    assert [s['iter'] for s in losses_straight] == list(range(1, 2 * ITERS_PER_EPOCH + 1))
    assert losses_resumed == losses_straight  # every term of every iteration, exactly
    if 'lvvit' in config.stem:
        assert {'loss_cls', 'loss_token'} <= set(losses_straight[0])


def test_a_resume_puts_the_sampler_and_the_workers_back_on_the_checkpoints_seed():
    """An iteration-based loop made its iterator, and mmengine's InfiniteSampler its order, when built from the
    config's seed (a worker has already drawn the first batches): follow_seed draws them again from the checkpoint's
    run's seed, and seeds the workers by runner.seed."""
    from functools import partial
    from types import SimpleNamespace

    from mmengine.dataset import InfiniteSampler
    from mmengine.dataset.utils import worker_init_fn
    from mmengine.runner.loops import _InfiniteDataloaderIterator
    from torch.utils.data import DataLoader

    from mmvitreg.engine.hooks.rng_state_hook import follow_seed

    def loader(seed):
        return DataLoader(
            list(range(64)),
            batch_size=8,
            sampler=InfiniteSampler(list(range(64)), seed=seed),
            num_workers=1,
            worker_init_fn=partial(worker_init_fn, num_workers=1, rank=0, seed=seed),
        )

    built = loader(seed=1)
    loop = SimpleNamespace(dataloader=built, dataloader_iterator=_InfiniteDataloaderIterator(built))
    follow_seed(SimpleNamespace(train_loop=loop, seed=0), sampler_seed=7)
    expected = _InfiniteDataloaderIterator(loader(seed=7))
    assert [next(loop.dataloader_iterator).tolist() for _ in range(10)] == [next(expected).tolist() for _ in range(10)]
    assert built.sampler.seed == 7 and built.worker_init_fn.keywords['seed'] == 0
