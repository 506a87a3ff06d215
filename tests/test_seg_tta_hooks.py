"""tools/test.py --tta on every segmentation config of the repository that has custom hooks: the hooks find the
model inside mmseg's SegTTAModel (DiversePatch's DropPathScheduleHook used to look up `backbone` on it)."""

import json
import re
from pathlib import Path

import pytest
import torch
from conftest import CONFIGS
from guard_helpers import tool
from mmengine.config import Config
from mmengine.registry import DefaultScope
from seg_helpers import shrunk_config

from mmvitreg.engine import GuardedRunner


def _with_bases(path: Path) -> str:
    """The text of a config and of every local ``.py`` it names (its ``_base_`` files), recursively."""
    text = path.read_text()
    local = [path.parent / name for name in re.findall(r"['\"]([^'\":]+\.py)['\"]", text)]
    return text + ''.join(_with_bases(p.resolve()) for p in local if p.is_file())


def seg_configs_with_custom_hooks():
    """Every config of configs/ in mmseg's scope with custom hooks (a text filter, then the loaded config)."""
    found = []
    for path in sorted(CONFIGS.rglob('*.py')):
        if '_base_' in path.parts:
            continue
        text = _with_bases(path)
        if 'mmseg::' in text and 'custom_hooks' in text:
            import mmvitreg  # noqa: F401  (mmseg:: bases need mmvitreg.compat)

            cfg = Config.fromfile(str(path))
            if cfg.get('default_scope') == 'mmseg' and cfg.get('custom_hooks'):
                found.append(path)
    return found


CASES = seg_configs_with_custom_hooks()


def test_the_list_holds_the_diversepatch_segmentation_configs():
    assert {p.name for p in CASES} >= {
        f'upernet_swin-{size}_8xb2-{sched}_diversepatch_{data}.py'
        for size in ('base', 'large')
        for sched, data in (('160k', 'ade20k-512x512'), ('80k', 'cityscapes-769x769'))
    }


@pytest.mark.parametrize('config', CASES, ids=[p.stem for p in CASES])
def test_tta_runs_with_the_configs_custom_hooks(config, digits_workspace, tmp_path, capsys, monkeypatch):
    cfg_path = shrunk_config(config, tmp_path / f'{config.stem}_tiny.py')
    cfg = Config.fromfile(str(cfg_path))
    assert cfg.custom_hooks  # kept by the shrinking
    cfg.test_dataloader.dataset.indices = 2  # 2 images x 6 scales x 2 flips
    cfg.dump(str(cfg_path))
    from mmseg.registry import MODELS

    with DefaultScope.overwrite_default_scope('mmseg'):
        model = MODELS.build(cfg.model)
    ckpt = tmp_path / 'untrained.pth'
    torch.save({'state_dict': model.state_dict()}, ckpt)
    monkeypatch.chdir(digits_workspace)
    tested, test = [], GuardedRunner.test

    def recording_test(runner):
        tested.append(type(runner.model).__name__)
        return test(runner)

    monkeypatch.setattr(GuardedRunner, 'test', recording_test)
    tool('test')([str(cfg_path), str(ckpt), '--tta', '--work-dir', str(tmp_path / 'work')])
    assert tested == ['SegTTAModel']  # the run was the TTA model's, with the config's hooks
    metrics = json.loads([ln for ln in capsys.readouterr().out.splitlines() if ln.startswith('metrics: ')][-1][9:])
    assert {'mIoU', 'aAcc'} <= set(metrics)
