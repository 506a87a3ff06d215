"""mmpretrain's analysis tools on a config of one's own that inherits ``mmvitreg::`` (DeepViT-tiny on the
digits set), through ``tools/analysis_tools/mmpretrain_tool.py``: each runs and writes its output."""

import pickle
import re
import subprocess
import sys
from types import SimpleNamespace

import mmcv
import mmpretrain
import numpy as np
import pytest
import torch
from conftest import run_tool, tool_env
from mmengine.config import Config
from mmengine.registry import init_default_scope

OWN_CONFIG = (
    "_base_ = 'mmvitreg::deepvit/deepvit-tiny_1xb64_digits.py'\n"
    "test_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict(indices=24))\n"
)
N_TEST = 24


def wrapper(*args, cwd, check=True):
    """``tools/analysis_tools/mmpretrain_tool.py ARGS`` (plots drawn off screen)."""
    return run_tool(['analysis_tools/mmpretrain_tool.py', *args], cwd=cwd, check=check, env={'MPLBACKEND': 'Agg'})


@pytest.fixture(scope='module')
def own(digits_workspace, tmp_path_factory):
    """The config, a checkpoint of its freshly initialised model and the predictions of ``tools/test.py --out``."""
    root = tmp_path_factory.mktemp('own')
    config = root / 'my_deepvit.py'
    config.write_text(OWN_CONFIG)
    from mmpretrain.registry import MODELS

    import mmvitreg  # noqa: F401  (the mmvitreg:: scope)

    init_default_scope('mmpretrain')
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(config).model)
    ckpt = root / 'init.pth'
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, ckpt)
    preds = root / 'preds.pkl'
    run_tool(['test.py', config, ckpt, '--work-dir', root / 'test', '--out', preds], cwd=digits_workspace)
    return SimpleNamespace(config=config, ckpt=ckpt, preds=preds, root=root)


def test_mmpretrain_tool_alone_refuses_an_mmvitreg_config(own, digits_workspace):
    """Why the wrapper exists: mmpretrain's print_config, run directly, cannot read the config."""
    script = f'{mmpretrain.__path__[0]}/.mim/tools/misc/print_config.py'
    proc = subprocess.run(
        [sys.executable, script, own.config],
        cwd=digits_workspace,
        env=tool_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and 'mmengine does not support to load mmvitreg config' in proc.stderr


def test_print_config_and_get_flops(own, digits_workspace):
    printed = wrapper('print_config', own.config, cwd=digits_workspace).stdout
    assert "type='mmvitreg.DeepViT'" in printed
    flops = wrapper('get_flops', own.config, '--shape', 32, cwd=digits_workspace).stdout
    assert re.search(r'Flops: [\d.]+[KMG]', flops) and re.search(r'Params: [\d.]+[KM]', flops)
    assert 'Input shape: (3, 32, 32)' in flops


def test_browse_dataset_writes_the_transformed_images(own, digits_workspace, tmp_path):
    """The default mode (``transformed``) needs the wrapper's two fixes (visualizer ``_scope_``, matplotlib's
    renderer) and draws the pipeline's output: with an ``Invert`` appended to the test pipeline the paper around
    each digit (light) comes out black, so the image's border, mostly paper, is dark in the picture; the
    untransformed image would leave it light."""
    config = own.root / 'inverted.py'
    config.write_text(
        f"_base_ = './{own.config.name}'\n"
        "test_dataloader = dict(dataset=dict(pipeline=[dict(type='LoadImageFromFile'), "
        "dict(type='Invert', prob=1.), dict(type='PackInputs')]))\n"
    )
    wrapper(
        'browse_dataset',
        config,
        '--phase',
        'test',
        '--show-number',
        3,
        '--not-show',
        '--output-dir',
        tmp_path,
        cwd=digits_workspace,
    )
    pictures = sorted(tmp_path.glob('*.JPEG'))
    assert len(pictures) == 3
    for picture in pictures:
        grey = mmcv.imread(str(picture), 'grayscale')  # the title above the image, the image fills the rest
        h, w = grey.shape[0] // 20, grey.shape[1] // 20
        below_title = grey[grey.shape[0] // 5 :]
        border = np.concatenate([below_title[:, :w].ravel(), below_title[:, -w:].ravel(), grey[-h:].ravel()])
        assert border.mean() < 80, f'{picture.name}: border mean {border.mean():.0f}, not the inverted image'


def test_vis_scheduler_draws_the_learning_rate(own, digits_workspace, tmp_path):
    wrapper(
        'vis_scheduler',
        own.config,
        '--dataset-size',
        256,
        '--not-show',
        '--save-path',
        tmp_path / 'lr.png',
        cwd=digits_workspace,
    )
    assert (tmp_path / 'lr.png').stat().st_size > 1000


def test_confusion_matrix_and_analyze_results_read_the_test_predictions(own, digits_workspace, tmp_path):
    wrapper(
        'confusion_matrix',
        own.config,
        own.preds,
        '--out',
        tmp_path / 'cm.pkl',
        '--show-path',
        tmp_path / 'cm.png',
        cwd=digits_workspace,
    )
    matrix = pickle.loads((tmp_path / 'cm.pkl').read_bytes())
    assert tuple(matrix.shape) == (10, 10) and int(matrix.sum()) == N_TEST
    assert (tmp_path / 'cm.png').is_file()
    wrapper('analyze_results', own.config, own.preds, '--out-dir', tmp_path / 'results', cwd=digits_workspace)
    painted = list((tmp_path / 'results').glob('*/*'))
    assert painted and {p.parent.name for p in painted} <= {'success', 'fail'}


def test_unknown_tool_names_the_available_ones(tmp_path):
    proc = wrapper('get_flop', cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "no tool 'get_flop'" in proc.stderr and 'get_flops' in proc.stderr
    assert 'Traceback' not in proc.stderr
