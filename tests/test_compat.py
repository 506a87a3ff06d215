"""mmvitreg.compat: each workaround fixes the breakage it names, shown against a fresh interpreter
without it (so these tests fail if the upstream behaviour or the patch changes), and each is applied
only on the stacks whose versions need it (shown by faking the installed versions)."""
import subprocess
import sys

import pytest
import torch
from packaging.version import Version

from conftest import CONFIGS, tool_env
from mmvitreg import compat

SEG = CONFIGS / 'deepvit' / 'upernet_deepvit-s_mln_8xb2-160k_ade20k-512x512.py'  # inherits mmseg::
ALL = ['checkpoint_weights_only', 'cpu_distributed', 'package_lookup', 'mmvitreg_config_scope',
       'compile_model_loss', 'mmvitreg_model_loading']


def run_py(code):
    return subprocess.run([sys.executable, '-c', code], env=tool_env(), capture_output=True, text=True, timeout=300)


def fake_versions(**versions):
    """Code that makes ``importlib.metadata.version`` report ``versions`` (e.g. torch='2.5.1') in a
    fresh interpreter, before mmvitreg is imported."""
    fake = {k.replace('_', '-'): v for k, v in versions.items()}
    return ("import importlib.metadata as md\n_real = md.version\n"
            f"md.version = lambda d: {fake!r}.get(d, None) or _real(d)\n")


# --- the gates -------------------------------------------------------------------------------

@pytest.mark.parametrize('torch_version, mmengine_version, pkg_resources, expected', [
    ('2.14.1', '0.10.7', False, ALL),                                             # the quick start, setuptools 82
    ('2.14.1', '0.10.7', True, ALL[:2] + ALL[3:]),                                # pkg_resources there: mmengine's
                                                                                  # own package lookup
    ('2.6.0', '0.10.3', False, ALL),                                              # first weights_only torch
    ('2.5.1', '0.10.7', False, ALL[1:]),                                          # torch before weights_only
    ('2.1.2', '0.10.3', True, [ALL[1]] + ALL[3:]),                                # the oldest stack
    ('2.14.1', '0.11.0', False, [ALL[0], 'mmvitreg_config_scope', ALL[-1]]),      # mmengine with the fixes: our
                                                                                  # allow-list still decides, our
                                                                                  # models still convert releases
])
def test_gates_read_the_installed_versions(monkeypatch, torch_version, mmengine_version, pkg_resources, expected):
    fake = {'torch': Version(torch_version), 'mmengine': Version(mmengine_version)}
    monkeypatch.setattr(compat, 'installed_version', fake.get)
    monkeypatch.setattr(compat, '_pkg_resources_missing', lambda: not pkg_resources)
    monkeypatch.setattr(compat, '_mmvitreg_editable', lambda: False)
    monkeypatch.setattr('mmengine.config.utils.MODULE2PACKAGE', {'mmpretrain': 'mmpretrain'})
    assert [p.name for p in compat.PATCHES if p.needed()] == expected


def test_package_lookup_gate_reads_whether_pkg_resources_is_importable(monkeypatch):
    """Patch 3 asks the import system, without importing ``pkg_resources``: blocked (``sys.modules`` entry
    ``None``, as setuptools >= 82 leaves it absent) it is missing; on this stack it is whatever is installed."""
    import importlib.util
    assert compat._pkg_resources_missing() is (importlib.util.find_spec('pkg_resources') is None)
    monkeypatch.setitem(sys.modules, 'pkg_resources', None)
    assert compat._pkg_resources_missing()


def test_package_lookup_gate_reads_whether_mmvitreg_is_editable(monkeypatch):
    """Patch 3 also runs for an editable mmvitreg, whose site-packages ``.mim`` is pointers that mmengine's
    metafile reader cannot follow: read from PEP 610's ``direct_url.json``, whatever ``pkg_resources`` does."""
    import importlib.metadata as md

    class Dist:
        def __init__(self, text):
            self.text = text

        def read_text(self, name):
            return self.text if name == 'direct_url.json' else None

    for text, editable in (('{"dir_info": {"editable": true}, "url": "file:///x"}', True),
                           ('{"dir_info": {}, "url": "file:///x"}', False), (None, False)):
        with monkeypatch.context() as m:
            m.setattr(md, 'distribution', lambda name, text=text: Dist(text))
            assert compat._mmvitreg_editable() is editable
    monkeypatch.setattr(compat, '_pkg_resources_missing', lambda: False)
    monkeypatch.setattr(compat, '_mmvitreg_editable', lambda: True)
    assert next(p for p in compat.PATCHES if p.name == 'package_lookup').needed()


def test_config_scope_gate_reads_mmengine_package_table(monkeypatch):
    """Once an mmengine lists ``mmvitreg`` in ``MODULE2PACKAGE`` itself, the registration is skipped."""
    monkeypatch.setattr('mmengine.config.utils.MODULE2PACKAGE', {'mmvitreg': 'mmvitreg'})
    gate = next(p for p in compat.PATCHES if p.name == 'mmvitreg_config_scope')
    assert not gate.needed()


def test_installed_version_drops_local_labels_and_absent_is_none():
    assert compat.installed_version('torch') == Version(Version(__import__('torch').__version__).base_version)
    assert compat.installed_version('no-such-distribution-xyz') is None


def test_this_stack_applies_exactly_the_patches_it_needs():
    import mmvitreg  # noqa: F401  (applies them)
    assert compat.applied() == compat.needed() == [p.name for p in compat.PATCHES if p.name in compat.applied()]
    assert 'mmvitreg_config_scope' in compat.applied()


def test_a_stack_that_needs_no_patch_gets_none():
    """Faked torch 2.5 + mmengine 0.11 (which knows nothing of mmvitreg): only the config scope is
    registered and mmvitreg's models load through mmvitreg (any mmengine); mmengine's checkpoint loader,
    distributed init and package lookup stay its own."""
    code = fake_versions(torch='2.5.1', mmengine='0.11.0') + (
        "import mmengine.dist.utils as du, mmengine.utils.package_utils as pu\n"
        "from mmengine.runner.checkpoint import CheckpointLoader\n"
        "before = (du._init_dist_pytorch, pu.is_installed, CheckpointLoader._schemes[''])\n"
        "import mmvitreg\nfrom mmvitreg import compat\n"
        "after = (du._init_dist_pytorch, pu.is_installed, CheckpointLoader._schemes[''])\n"
        "print(compat.applied(), before == after)")
    proc = run_py(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split('\n')[-2] == "['mmvitreg_config_scope', 'mmvitreg_model_loading'] True"


# --- the patches, each against the breakage it names -------------------------------------------

SAVE_RUNNER_STYLE_CHECKPOINT = '''
import numpy as np, torch
from mmengine.logging import MessageHub
hub = MessageHub.get_instance('compat-test')
hub.update_scalar('train/loss', np.float64(0.5))
torch.save({'meta': {'epoch': 1, 'seed': np.int64(3)}, 'state_dict': {'w': torch.ones(2)},
            'message_hub': hub.state_dict()}, 'CKPT')
'''


def test_mmengine_checkpoints_load_where_torch_defaults_to_weights_only(tmp_path):
    """mmengine #1655: runner checkpoints pickle HistoryBuffer / numpy scalars, which torch>=2.6's
    weights_only default refuses. The gate agrees with the installed torch: where it says the patch
    is needed, plain mmengine fails and mmvitreg's loader reads the file; where not, both read it."""
    ckpt = tmp_path / 'runner.pth'
    load = f"from mmengine.runner import CheckpointLoader\nck = CheckpointLoader.load_checkpoint('{ckpt}')\n" \
           "print('epoch', ck['meta']['epoch'])"
    assert run_py(SAVE_RUNNER_STYLE_CHECKPOINT.replace('CKPT', str(ckpt))).returncode == 0
    plain = run_py(load)
    if 'checkpoint_weights_only' in compat.needed():
        assert plain.returncode != 0 and 'weights_only' in plain.stderr
    else:
        assert plain.returncode == 0 and 'epoch 1' in plain.stdout, plain.stderr
    patched = run_py('import mmvitreg\n' + load)
    assert patched.returncode == 0, patched.stderr
    assert 'epoch 1' in patched.stdout


def test_cross_repo_base_without_pkg_resources():
    """mmengine PR #1676: `_base_ = 'mmseg::...'` imports pkg_resources, gone in setuptools>=82."""
    code = ("import sys; sys.modules['pkg_resources'] = None\n{imp}"
            "from mmengine.config import Config\n"
            f"cfg = Config.fromfile(r'{SEG}')\nprint(cfg.model.type, cfg.model.backbone.type)")
    broken = run_py(code.format(imp=''))
    assert broken.returncode != 0 and 'pkg_resources' in broken.stderr
    fixed = run_py(code.format(imp='import mmvitreg\n'))
    assert fixed.returncode == 0, fixed.stderr
    assert 'EncoderDecoder mmvitreg.DeepViT' in fixed.stdout


def test_installed_path_lookup_matches_module_location():
    from mmvitreg.compat import get_installed_path, is_installed
    import mmseg
    import os.path as osp
    assert is_installed('mmseg') and is_installed('mmsegmentation') and not is_installed('no_such_pkg_xyz')
    assert get_installed_path('mmseg') == get_installed_path('mmsegmentation') == osp.dirname(mmseg.__file__)


MMVITREG_BASE = '''
from mmengine.config import Config
from mmengine.registry import DATASETS, init_default_scope
{setup}
open(r'{mine}', 'w').write("_base_ = 'mmvitreg::demo/deit-tiny_1xb64_digits.py'\\n")
cfg = Config.fromfile(r'{mine}')
init_default_scope(cfg.default_scope)
dataset = cfg.train_dataloader.dataset.to_dict()
with DATASETS.switch_scope_and_registry(dataset.pop('_scope_', None)) as registry:
    print(cfg.default_scope, registry.scope, getattr(registry.get(dataset['type']), '__name__', None))
'''


def test_mmvitreg_base_resolves_and_keeps_its_library_scope(tmp_path):
    """``_base_ = 'mmvitreg::...'``: mmengine 0.10 knows no package ``mmvitreg``; told only that, it
    stamps ``_scope_='mmvitreg'`` on the inherited data set, which then is looked up in our registry,
    where mmpretrain's ``CustomDataset`` does not exist. With mmvitreg imported the base resolves and its data set is mmpretrain's."""
    def run(setup):
        return run_py(MMVITREG_BASE.format(setup=setup, mine=tmp_path / 'mine.py'))

    unknown = run('')
    assert unknown.returncode != 0 and 'mmengine does not support to load mmvitreg config' in unknown.stderr
    # mmengine told only the package and where it is (the checkout), without mmvitreg.compat
    stamped = run("import importlib.util, os.path\nimport mmengine.config.config as cc\n"
                  "from mmengine.config.utils import MODULE2PACKAGE\nMODULE2PACKAGE['mmvitreg'] = 'mmvitreg'\n"
                  "cc.is_installed = lambda package: True\n"
                  "cc.get_installed_path = lambda package: os.path.dirname(importlib.util.find_spec(package).origin)")
    assert stamped.returncode == 0, stamped.stderr
    assert stamped.stdout.split('\n')[-2] == 'mmpretrain mmvitreg None'  # sent to our scope: not found
    fixed = run('import mmvitreg')
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.split('\n')[-2] == 'mmpretrain mmpretrain CustomDataset'
