"""TL-Align diagnostics: the RMSE between the CutMix and the aligned target (paper Fig. 3) and the label maps
before and after alignment (paper Fig. 5), through tools/analysis_tools on the bundled digits."""

import csv

import numpy as np
import pytest
import torch
from conftest import CONFIGS
from guard_helpers import tool
from studies.tl_align_diagnostics import alignment_rmse, label_maps

from mmvitreg.models.target_transforms import TLAlign
from mmvitreg.models.trace import MixPlan, TokenTrace
from mmvitreg.registry import MODELS

DEIT = CONFIGS / 'tlalign' / 'deit-tiny_1xb64_cutmix-tlalign_digits.py'
SWIN = CONFIGS / 'tlalign' / 'swin-nano_1xb64_cutmix-tlalign_digits.py'


@pytest.fixture(scope='module')
def digits(tmp_path_factory):
    from digits import build_imagenet

    root = tmp_path_factory.mktemp('tla_digits') / 'digits'
    build_imagenet(str(root), num_train=32, num_val=32)
    return root


def data_options(root, *extra):
    return ['--cfg-options', f'val_dataloader.dataset.data_root={root}', *extra]


def read_csv(path):
    with open(path) as f:
        return {row['model']: row for row in csv.DictReader(f)}


def test_rmse_tool_measures_cutmix_against_aligned_targets_per_model(digits, tmp_path, capfd):
    """Fig. 3: one CSV row per model; CutMix targets move under alignment (RMSE > 0, RMSE >= mean |w - lam|),
    MixUp gives every token lam, which alignment keeps (RMSE 0): the tool measures the alignment, not noise."""
    rmse = tool('analysis_tools/tl_align_rmse')
    out = tmp_path / 'cutmix.csv'
    rmse(
        [
            '--model',
            'deit',
            str(DEIT),
            '--model',
            'swin',
            str(SWIN),
            '--num-images',
            '32',
            '--batch-size',
            '16',
            '--num-workers',
            '0',
            '--device',
            'cpu',
            '--out',
            str(out),
            *data_options(digits),
        ]
    )
    rows = read_csv(out)
    printed = capfd.readouterr().out
    assert 'deit' in printed and printed.count('32/32') == 2  # a progress bar per model
    assert 'Initialized by' not in printed and 'TruncNormalInit' not in printed  # no init log
    assert 'note:' not in printed
    assert (tmp_path / 'cutmix.png').stat().st_size > 1000
    for row in rows.values():
        assert int(row['images']) == 32 and row['checkpoint'] == 'untrained'
        assert float(row['rmse']) > 1e-5 and float(row['rmse']) >= float(
            row['mean_abs_diff']
        )  # untrained: maps near uniform
        assert 0 < float(row['mean_lam']) < 1 and 0 < float(row['mean_aligned']) < 1
    mixup = tmp_path / 'mixup.csv'
    rmse(
        [
            '--model',
            'deit',
            str(DEIT),
            '--num-images',
            '40',
            '--batch-size',
            '16',
            '--num-workers',
            '0',
            '--device',
            'cpu',
            '--out',
            str(mixup),
            *data_options(digits, 'model.train_cfg.mix.type=mmvitreg.PixelMixup'),
        ]
    )
    assert float(read_csv(mixup)['deit']['rmse']) < 1e-7
    assert 'note: the val split holds only 32 images, fewer than the 40 asked' in capfd.readouterr().out


def test_rmse_is_the_root_mean_square_of_aligned_minus_area_share():
    """alignment_rmse over batches: sqrt(mean (w - lam)^2) with w TLAlign's own share and lam the plan's."""
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = MODELS.build(
                dict(
                    type='mmvitreg.VisionTransformer',
                    arch=dict(embed_dims=24, num_layers=2, num_heads=2, feedforward_channels=48),
                    img_size=16,
                    patch_size=4,
                )
            )
            self.target_transform = TLAlign(num_layers=2)
            self.masks = iter([torch.rand(4, 4, 4), torch.rand(4, 4, 4)])

        def data_preprocessor(self, batch, training):
            return dict(
                inputs=batch['inputs'],
                mix_plan=MixPlan(torch.arange(3, -1, -1), next(self.masks), torch.ones(4, 16, 16)),
            )

    model = Model().eval()
    batches = [dict(inputs=torch.randn(4, 3, 16, 16)) for _ in range(2)]  # as a data loader gives them
    res = alignment_rmse(model, batches, num_images=6)
    torch.manual_seed(0)
    again = Model().eval()
    diffs = []
    for x in batches:
        data = again.data_preprocessor(x, True)
        trace = TokenTrace.for_request(again.target_transform.trace_request, mix=data['mix_plan'])
        with torch.no_grad():
            again.backbone(x['inputs'], trace=trace)
        diffs.append(again.target_transform.aligned_weights(trace) - data['mix_plan'].lam)
    diff = torch.cat(diffs)[:6].double()
    assert res.num_images == 6
    assert res.rmse == pytest.approx(float(diff.pow(2).mean().sqrt()), abs=1e-6)
    assert res.mean_abs == pytest.approx(float(diff.abs().mean()), abs=1e-6)


def test_label_maps_tool_draws_mixed_image_initial_and_aligned_maps(digits, tmp_path, capsys):
    """Fig. 5: a PNG with the mixed image, the initial and the aligned maps after the chosen blocks; the
    printed aligned shares are the targets TLAlign trains on."""
    out = tmp_path / 'maps.png'
    tool('analysis_tools/tl_align_label_maps')(
        [
            str(SWIN),
            '--layers',
            '1',
            '-1',
            '--num-images',
            '2',
            '--device',
            'cpu',
            '--out',
            str(out),
            *data_options(digits),
        ]
    )
    assert out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    printed = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith('image ')]
    assert len(printed) == 2


def test_label_maps_follow_each_blocks_grid():
    """Swin: the map after a stage-1 block is on the 8x8 grid, after a stage-2 block on the merged 4x4 grid; a
    ViT's maps drop the cls token; each map is the own share of the streamed labels."""
    torch.manual_seed(0)
    swin = MODELS.build(
        dict(
            type='mmvitreg.SwinTransformer',
            arch=dict(embed_dims=16, depths=[2, 2], num_heads=[2, 2]),
            img_size=32,
            window_size=4,
            out_indices=(1,),
        )
    ).eval()
    plan = MixPlan(torch.tensor([1, 0]), torch.rand(2, 8, 8), torch.ones(2, 32, 32))
    trace = TokenTrace.for_request(TLAlign(num_layers=4).trace_request, mix=plan)
    with torch.no_grad():
        swin(torch.randn(2, 3, 32, 32), trace=trace)
    maps = label_maps(trace, [0, -1])
    assert maps[0].shape == (2, 8, 8) and maps[3].shape == (2, 4, 4)
    assert torch.equal(maps[3].flatten(1), trace.streamed[3][..., 0])
    with pytest.raises(IndexError, match='block index 7 is out of range for a backbone with 4 blocks'):
        label_maps(trace, [7])
    np.testing.assert_allclose(trace.streamed[3].sum(-1).numpy(), 1, atol=1e-6)
