"""The tools' messages: a trace user the backbone cannot serve stops tools/train.py and tools/test.py with one
`error:` line before the runner starts (as a misspelled type does), not a traceback after the config dump."""

import pytest
import torch
from conftest import CONFIGS, run_tool
from mmengine.config import Config

SWIN_TOKEN_LABELS = f'''_base_ = '{CONFIGS / "demo" / "swin-nano_1xb64_mixtoken_digits.py"}'
model = dict(head=dict(_delete_=True, type='mmvitreg.TokenLabelHead', num_classes=10, in_channels=64))
'''


@pytest.mark.parametrize('tool', ['train.py', 'test.py'])
def test_a_trace_user_the_backbone_cannot_serve_is_one_error_line(tool, digits_workspace, tmp_path):
    config = tmp_path / 'swin-nano_token-labels_digits.py'
    config.write_text(SWIN_TOKEN_LABELS)
    args = [tool, config, '--work-dir', tmp_path / 'work']
    if tool == 'test.py':
        torch.save({'state_dict': {}}, tmp_path / 'empty.pth')
        args.insert(2, tmp_path / 'empty.pth')
    proc = run_tool(args, cwd=digits_workspace, check=False)
    assert proc.returncode != 0
    # one line, no traceback (after mmcv-lite's warning that it lacks MultiScaleDeformableAttention, where it is)
    lines = [ln for ln in proc.stderr.strip().splitlines() if 'MultiScaleDeformableAttention' not in ln]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: model: TokenLabelHead needs the fact ['cls_token']")
    assert 'SwinTransformer' in lines[0]
    assert 'Config:' not in proc.stdout + proc.stderr  # stopped before the runner dumps the config


@pytest.mark.parametrize('checkpoint', ['/nonexistent/swin_tiny.pth', 'http://127.0.0.1:9/swin_tiny.pth'])
def test_an_init_cfg_checkpoint_that_cannot_be_read_stops_once_naming_the_key_to_set(checkpoint, tmp_path):
    """The DRLoc UperNet (its backbone's ``init_cfg`` a release URL) offline, or with a local file that is not there:
    one ``error:`` line, printed once, naming the key and both ways out (a local file, or no ``init_cfg``)."""
    from seg_helpers import shrunk_config

    run_tool(['dataset_converters/digits.py', 'ade20k', '--out', 'data', '--num-train', 4, '--num-val', 2], tmp_path)
    config = shrunk_config(
        CONFIGS / 'drloc' / 'upernet_swin-t_drloc_8xb2-160k_ade20k-512x512.py', tmp_path / 'drloc.py', keep=['init_cfg']
    )  # (.py: the pipelines keep their tuples)
    cfg = Config.fromfile(str(config))
    cfg.model.aux_losses[0].in_channels = 128  # the tiny Swin's last stage
    cfg.dump(str(config))
    proc = run_tool(
        ['train.py', config, '--work-dir', 'work', '--cfg-options', f'model.backbone.init_cfg.checkpoint={checkpoint}'],
        tmp_path,
        check=False,
    )
    assert proc.returncode != 0
    key = 'model.backbone.init_cfg'
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f'error: checkpoint {checkpoint}') and '\n' not in line
    assert line.endswith(f'--cfg-options {key}.checkpoint=<local file>, or {key}=None to start from random weights')
    output = proc.stdout + proc.stderr
    assert output.count(f'error: checkpoint {checkpoint}') == 1 and 'print_log' not in output, output[-3000:]
    (log,) = (tmp_path / 'work').glob('*/*.log')  # the run's log keeps it
    assert line in log.read_text()
