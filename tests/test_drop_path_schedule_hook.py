"""DropPathScheduleHook (DiversePatch §5.2: stochastic depth 0.3 for the first 80 % of the iterations, 0.5 for
the last 20 %) finds the DropPath modules of mmpretrain, mmseg, mmdet and mmvitreg backbones and changes their
rates, per block as the backbone set them, inside a real mmengine runner."""

import numpy as np
import pytest
import torch
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

from mmvitreg.engine.hooks import DropPathScheduleHook, drop_path_modules
from mmvitreg.registry import HOOKS

MAX_ITERS = 10


def backbone(kind):
    if kind == 'mmpretrain':
        from mmpretrain.models import VisionTransformer

        return VisionTransformer(
            arch=dict(embed_dims=16, num_layers=3, num_heads=2, feedforward_channels=32),
            img_size=32,
            patch_size=8,
            drop_path_rate=0.3,
        )
    if kind == 'mmseg':
        from mmseg.models.backbones import SwinTransformer

        return SwinTransformer(
            embed_dims=16,
            depths=[1, 2],
            num_heads=[1, 2],
            window_size=4,
            strides=(4, 2),
            out_indices=(1,),
            drop_path_rate=0.3,
        )
    if kind == 'mmdet':
        from mmdet.models.backbones import SwinTransformer

        return SwinTransformer(
            embed_dims=16,
            depths=[1, 2],
            num_heads=[1, 2],
            window_size=4,
            strides=(4, 2),
            out_indices=(1,),
            drop_path_rate=0.3,
        )
    from mmvitreg.models.backbones import SwinTransformer

    return SwinTransformer(
        arch=dict(embed_dims=16, depths=[1, 2], num_heads=[1, 2]),
        img_size=32,
        window_size=4,
        out_indices=(1,),
        drop_path_rate=0.3,
    )


class Toy(BaseModel):
    def __init__(self, kind):
        super().__init__()
        self.backbone = backbone(kind)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        feats = self.backbone(torch.stack(inputs))
        return dict(loss=sum(f.float().square().mean() for f in feats))


class Recorder(Hook):
    priority = 'LOWEST'

    def __init__(self):
        self.rates = []

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        self.rates.append([m.drop_prob for m in drop_path_modules(runner.model.backbone)])


@pytest.mark.parametrize('kind', ['mmpretrain', 'mmseg', 'mmdet', 'mmvitreg'])
def test_rates_follow_the_schedule_per_block_through_a_runner(kind, tmp_path):
    """Iterations 0-7 run at 0.3, 8-9 (the last 20 %) at 0.5; every block keeps its share of the largest rate."""
    model = Toy(kind)
    built = [m.drop_prob for m in drop_path_modules(model.backbone)]
    assert len(built) >= 2 and max(built) == pytest.approx(0.3)
    recorder = Recorder()
    runner = Runner(
        model=model,
        work_dir=str(tmp_path),
        train_dataloader=dict(
            dataset=[dict(inputs=torch.randn(3, 32, 32)) for _ in range(4)],
            sampler=dict(type='DefaultSampler', shuffle=False),
            batch_size=2,
            collate_fn=dict(type='pseudo_collate'),
        ),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        train_cfg=dict(by_epoch=False, max_iters=MAX_ITERS),
        custom_hooks=[dict(type='mmvitreg.DropPathScheduleHook'), recorder],
        default_hooks=dict(checkpoint=None, logger=None),
        default_scope='mmengine',
    )
    runner.train()
    shares = np.array(built) / 0.3
    assert len(recorder.rates) == MAX_ITERS
    for it, rates in enumerate(recorder.rates):
        np.testing.assert_allclose(rates, shares * (0.3 if it < 8 else 0.5), rtol=1e-6)


def test_builds_in_every_scope_and_refuses_bad_input():
    for scope in ('mmpretrain', 'mmseg', 'mmdet'):
        with DefaultScope.overwrite_default_scope(scope):
            from mmengine.registry import HOOKS as ROOT

            assert isinstance(ROOT.build(dict(type='mmvitreg.DropPathScheduleHook')), DropPathScheduleHook)
    hook = HOOKS.build(dict(type='mmvitreg.DropPathScheduleHook', schedule=[(0, 0.1), (0.5, 0.2), (0.9, 0.4)]))
    assert [hook.rate_at(p) for p in (0, 0.49, 0.5, 0.95)] == [0.1, 0.1, 0.2, 0.4]
    with pytest.raises(ValueError, match='strictly increasing'):
        DropPathScheduleHook(schedule=[(0.2, 0.3)])
    with pytest.raises(ValueError, match='rates must be in'):
        DropPathScheduleHook(schedule=[(0, 1.5)])

    class Runnerish:
        model = Toy('mmvitreg')

    for m in drop_path_modules(Runnerish.model):
        m.drop_prob = 0.0
    with pytest.raises(ValueError, match='drop_path_rate > 0'):
        DropPathScheduleHook().before_run(Runnerish)
