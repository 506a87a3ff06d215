"""mmvitreg.compat: each workaround fixes the breakage it names, shown against a fresh interpreter
without it (so these tests fail if the upstream behaviour or the patch changes)."""
import subprocess
import sys

from conftest import CONFIGS, tool_env

SEG = CONFIGS / 'demo' / 'upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py'


def run_py(code):
    return subprocess.run([sys.executable, '-c', code], env=tool_env(), capture_output=True, text=True, timeout=300)


SAVE_RUNNER_STYLE_CHECKPOINT = '''
import numpy as np, torch
from mmengine.logging import MessageHub
hub = MessageHub.get_instance('compat-test')
hub.update_scalar('train/loss', np.float64(0.5))
torch.save({'meta': {'epoch': 1, 'seed': np.int64(3)}, 'state_dict': {'w': torch.ones(2)},
            'message_hub': hub.state_dict()}, 'CKPT')
'''


def test_mmengine_checkpoints_load_on_torch_2_6_plus(tmp_path):
    """mmengine #1655: runner checkpoints pickle HistoryBuffer / numpy scalars, which torch>=2.6's
    weights_only default refuses; with mmvitreg imported, mmengine's loader reads them."""
    ckpt = tmp_path / 'runner.pth'
    save = SAVE_RUNNER_STYLE_CHECKPOINT.replace('CKPT', str(ckpt))
    load = f"from mmengine.runner import CheckpointLoader\nck = CheckpointLoader.load_checkpoint('{ckpt}')\n" \
           "print('epoch', ck['meta']['epoch'])"
    assert run_py(save).returncode == 0
    broken = run_py(load)
    assert broken.returncode != 0 and 'weights_only' in broken.stderr
    fixed = run_py('import mmvitreg\n' + load)
    assert fixed.returncode == 0, fixed.stderr
    assert 'epoch 1' in fixed.stdout


def test_cross_repo_base_without_pkg_resources():
    """mmengine PR #1676: `_base_ = 'mmseg::...'` imports pkg_resources, gone in setuptools>=82."""
    code = ("import sys; sys.modules['pkg_resources'] = None\n{imp}"
            "from mmengine.config import Config\n"
            f"cfg = Config.fromfile(r'{SEG}')\nprint(cfg.model.type, cfg.model.backbone.type)")
    broken = run_py(code.format(imp=''))
    assert broken.returncode != 0 and 'pkg_resources' in broken.stderr
    fixed = run_py(code.format(imp='import mmvitreg\n'))
    assert fixed.returncode == 0, fixed.stderr
    assert 'EncoderDecoder mmvitreg.SwinTransformer' in fixed.stdout


def test_installed_path_lookup_matches_module_location():
    from mmvitreg.compat import get_installed_path, is_installed
    import mmseg
    import os.path as osp
    assert is_installed('mmseg') and is_installed('mmsegmentation') and not is_installed('no_such_pkg_xyz')
    assert get_installed_path('mmseg') == get_installed_path('mmsegmentation') == osp.dirname(mmseg.__file__)
