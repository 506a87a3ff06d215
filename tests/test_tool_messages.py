"""The tools' messages: a trace user the backbone cannot serve stops tools/train.py and tools/test.py with one
`error:` line before the runner starts (as a misspelled type does), not a traceback after the config dump."""
import pytest
import torch

from conftest import CONFIGS, run_tool

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
