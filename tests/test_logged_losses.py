"""tools/train.py logs the truth: `loss` is the total the backward uses (the sum of the named terms; the head's
term is `loss_cls`), and TL-Align adds one scalar per iteration (`tla_shift`), on DeepViT + TL-Align + DRLoc +
the attention-cosine regulariser composed as a user would; a CPU run logs the gloo backend it uses."""

import json

import pytest
from conftest import CONFIGS
from guard_helpers import build_workspace, train

COMPOSED = f'''_base_ = '{CONFIGS / "deepvit" / "deepvit-tiny_1xb64_digits.py"}'
model = dict(
    type='mmvitreg.TokenClassifier',
    target_transform=dict(type='mmvitreg.TLAlign', num_layers=4),
    aux_losses=[dict(type='mmvitreg.DRLoc', in_channels=96, layers=(-1, ), num_pairs=16),
                dict(type='mmvitreg.AttentionCosineLoss', num_pairs=3)],
    train_cfg=dict(_delete_=True, mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=4)))
'''


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('logs_ws'))


def test_the_logged_loss_of_a_composed_run_is_the_sum_of_its_parts(ws, tmp_path):
    config = tmp_path / 'deepvit-tiny_tlalign-drloc-cos_digits.py'
    config.write_text(COMPOSED)
    train(config, ws, tmp_path / 'work', **{'train_cfg.max_epochs': 1, 'train_cfg.val_interval': 1})
    scalars = next((tmp_path / 'work').glob('*/vis_data/scalars.json')).read_text().splitlines()
    steps = [s for s in map(json.loads, scalars) if 'loss' in s]
    assert len(steps) == 2  # 128 images, batch 64
    parts = ('loss_cls', 'loss_drloc', 'loss_attn_cos')
    for step in steps:
        assert all(step[p] > 0 for p in parts)
        assert step['loss'] == pytest.approx(sum(step[p] for p in parts), abs=3e-4)  # 4 printed digits each
        assert 0 <= step['tla_shift'] <= 1
    log = next((tmp_path / 'work').glob('*/*.log')).read_text()
    line = [ln for ln in log.splitlines() if 'loss_drloc:' in ln][-1]
    words = line.split()
    printed = {k[:-1]: float(v) for k, v in zip(words, words[1:]) if k[:-1] in parts + ('loss',)}
    assert printed['loss'] == pytest.approx(sum(printed[p] for p in parts), abs=3e-4)
    assert 'tla_shift:' in line
    # a CPU run initialises (and logs) gloo, not the configs' NCCL
    assert "dist_cfg: {'backend': 'gloo'}" in log and 'nccl' not in log
