"""Issue 44 item 3: one loading path for every runner. mmpretrain's own ``tools/train.py`` builds mmengine's plain
``Runner`` (the configs name none), whose ``load_from`` reaches the model through the ``_load_checkpoint_to_model``
that ``mmengine.runner.runner`` imported by name; an mmvitreg model gets there the same pass as through
mmengine's ``load_checkpoint`` and inferencers (``mmvitreg.engine.checkpoint.fill_model``): a file that leaves a
parameter unfilled stops the run with one line before any step, and an official release is converted and loads
exactly the converter's weights."""

import textwrap

import pytest
import torch
from guard_helpers import TECHNIQUES, build_workspace
from mmengine.config import Config
from model_helpers import random_checkpoint
from test_model_converters import official_state_dict
from test_plain_models import mmpretrain_train

from mmvitreg.models.backbones.deepvit import convert_deepvit

DEEPVIT = TECHNIQUES[0]
DROPPED = 'backbone.layers.0.ffn.layers.0.0.weight'


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    ws = build_workspace(tmp_path_factory.mktemp('host_runner_ws'))
    # the DeepViT digits recipe at the width of a tiny official release (CNN stem, re-attention in blocks 3-4);
    # lr 0: the saved weights are the loaded ones (BatchNorm statistics aside)
    (ws / 'release_sized.py').write_text(
        textwrap.dedent(f'''
        _base_ = '{DEEPVIT}'
        model = dict(backbone=dict(patch_size=16, arch=dict(
            _delete_=True, embed_dims=36, num_layers=4, num_heads=12, feedforward_channels=108,
            attn_types=[False] * 2 + [True] * 2, stem=dict(channels=8, num_convs=2), scale_adjustment=0.5)),
            head=dict(in_channels=36))
        optim_wrapper = dict(optimizer=dict(lr=0.))
    ''')
    )
    return ws


def test_a_partial_file_stops_mmpretrains_own_train_py_before_any_step(ws, tmp_path):
    """mmengine's Runner alone loads it with a warning and trains a model with a random FFN weight."""
    full = random_checkpoint(Config.fromfile(str(DEEPVIT)), tmp_path / 'full.pth')
    state = torch.load(full, map_location='cpu', weights_only=False)
    del state['state_dict'][DROPPED]
    partial = tmp_path / 'partial.pth'
    torch.save(state, partial)
    proc = mmpretrain_train(ws, DEEPVIT, tmp_path / 'work', False, load_from=partial)
    assert proc.returncode != 0, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert 'CheckpointError' in last and DROPPED in last, proc.stderr[-3000:]
    assert not list((tmp_path / 'work').rglob('epoch_*.pth'))


def test_an_official_release_trains_from_its_converted_weights_in_mmpretrains_own_train_py(ws, tmp_path):
    release = official_state_dict(dim=36, depth=4, heads=12, reattn=(2, 3), stem=(8, 2), classes=10, img_size=32)
    torch.save(release, tmp_path / 'release.pth')
    proc = mmpretrain_train(ws, 'release_sized.py', tmp_path / 'work', False, load_from=tmp_path / 'release.pth')
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = next((tmp_path / 'work').rglob('*.log')).read_text()
    assert 'official DeepViT' in log  # the conversion's own line
    saved = torch.load(tmp_path / 'work' / 'epoch_1.pth', map_location='cpu', weights_only=False)['state_dict']
    expected = convert_deepvit(release)
    weights = [k for k in saved if not k.rsplit('.', 1)[-1].startswith(('running_', 'num_batches'))]
    assert sorted(weights) == sorted(k for k in expected if k in weights) and len(weights) > 50
    assert all(torch.equal(saved[k], expected[k]) for k in weights)


def test_mmpretrains_own_train_py_resumes_a_checkpoint_of_an_mmvitreg_model(ws, tmp_path):
    """Issue 47 item 1: torch's allow-list is no longer widened at ``import mmvitreg``, so mmengine's plain Runner
    reads the file of an mmvitreg model (its message hub holds HistoryBuffers and numpy arrays, which torch >= 2.6
    alone refuses) through mmvitreg's reader, with the allow-list for that read: the resume continues at epoch 2."""
    first = mmpretrain_train(ws, DEEPVIT, tmp_path / 'first', False)
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint = tmp_path / 'first' / 'epoch_1.pth'
    resumed = mmpretrain_train(
        ws, DEEPVIT, tmp_path / 'resumed', False, resume=True, load_from=checkpoint, **{'train_cfg.max_epochs': 2}
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert 'resumed epoch: 1' in next((tmp_path / 'resumed').rglob('*.log')).read_text()
    assert sorted(p.name for p in (tmp_path / 'resumed').glob('epoch_*.pth')) == ['epoch_2.pth']
