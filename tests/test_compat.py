"""mmvitreg.compat: each workaround fixes the breakage it names, shown against a fresh interpreter
without it (so these tests fail if the upstream behaviour or the patch changes), each is applied
only on the stacks whose versions need it (shown by faking the installed versions), and ``import mmvitreg``
replaces no other host function."""

import importlib.metadata
import json
import subprocess
import sys

import pytest
from conftest import tool_env
from packaging.version import Version

from mmvitreg import compat
from mmvitreg.fileio import TORCH_WEIGHTS_ONLY

ALL = ['mmvitreg_config_scope', 'mmvitreg_model_loading']


def run_py(code):
    return subprocess.run([sys.executable, '-c', code], env=tool_env(), capture_output=True, text=True, timeout=300)


def fake_versions(**versions):
    """Code that makes ``importlib.metadata.version`` report ``versions`` (e.g. torch='2.5.1') in a
    fresh interpreter, before mmvitreg is imported."""
    fake = {k.replace('_', '-'): v for k, v in versions.items()}
    return (
        "import importlib.metadata as md\n_real = md.version\n"
        f"md.version = lambda d: {fake!r}.get(d, None) or _real(d)\n"
    )


# --- the gates -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'torch_version, mmengine_version, expected',
    [
        ('2.14.1', '0.10.7', ALL),  # the quick start
        ('2.6.0', '0.10.3', ALL),  # first weights_only torch: torch's allow-list is left as it is all the same
        ('2.5.1', '0.10.7', ALL),  # torch before weights_only
        ('2.1.2', '0.10.3', ALL),  # the oldest stack
        ('2.14.1', '0.11.0', ALL),  # mmengine with PR #1670: our models still convert releases
    ],
)
def test_gates_read_the_installed_versions(monkeypatch, torch_version, mmengine_version, expected):
    fake = {'torch': Version(torch_version), 'mmengine': Version(mmengine_version)}
    monkeypatch.setattr(compat, 'installed_version', fake.get)
    monkeypatch.setattr('mmengine.config.utils.MODULE2PACKAGE', {'mmpretrain': 'mmpretrain'})
    assert [p.name for p in compat.PATCHES if p.needed()] == expected


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


HOST_FUNCTIONS = '''
import torch
import mmengine.config.config as cc, mmengine.dist.utils as du, mmengine.infer.infer as infer
import mmengine.runner.checkpoint as rc, mmengine.utils as mu, mmengine.utils.package_utils as pu
import mmpretrain.utils.dependency as dependency
from mmengine.model import MMDistributedDataParallel
from mmengine.runner import Runner


def host():
    return dict(init_dist=du._init_dist_pytorch, ddp_init=MMDistributedDataParallel.__init__,
                maybe_compile=Runner._maybe_compile, is_installed=(pu.is_installed, mu.is_installed, cc.is_installed),
                installed_path=(pu.get_installed_path, mu.get_installed_path, cc.get_installed_path),
                loaders=dict(rc.CheckpointLoader._schemes), multimodal=dependency.WITH_MULTIMODAL,
                get_cfg_path=cc.Config._get_cfg_path,
                load_to_model=(rc._load_checkpoint_to_model, infer._load_checkpoint_to_model, rc.load_checkpoint,
                               rc._load_checkpoint, Runner.load_checkpoint),
                safe_globals=sorted(map(str, torch.serialization.get_safe_globals())))


before = host()
import mmvitreg
print(sorted(k for k, v in host().items() if v != before[k]))
'''


def test_import_replaces_no_host_function_but_the_config_lookup_and_the_model_loading():
    """In a fresh interpreter, ``import mmvitreg`` leaves mmengine's distributed init, DDP wrapper, compile step,
    package lookup, every checkpoint loader (local and remote) and torch's ``weights_only`` allow-list as they were,
    and mmpretrain's multimodal switch unless transformers 5 breaks it; it wraps ``Config._get_cfg_path``
    (``mmvitreg::`` paths only) and mmengine's loading into a model (mmvitreg's models only:
    tests/test_no_global_patch.py)."""
    proc = run_py(HOST_FUNCTIONS)
    assert proc.returncode == 0, proc.stderr
    multimodal = ['multimodal'] if 'multimodal_off' in compat.needed() else []
    assert proc.stdout.split('\n')[-2] == str(sorted(['get_cfg_path', 'load_to_model'] + multimodal))


# --- the patches, each against the breakage it names -------------------------------------------

SAVE_RUNNER_STYLE_CHECKPOINT = '''
import numpy as np, torch
from mmengine.logging import MessageHub
hub = MessageHub.get_instance('compat-test')
hub.update_scalar('train/loss', np.float64(0.5))
torch.save({'meta': {'epoch': 1, 'seed': np.int64(3)}, 'state_dict': {'w': torch.ones(2)},
            'message_hub': hub.state_dict()}, 'CKPT')
'''


def test_mmengine_checkpoints_read_by_mmengine_as_without_mmvitreg_and_by_mmvitregs_reader(tmp_path):
    """mmengine #1655: runner checkpoints pickle HistoryBuffer / numpy scalars, which torch>=2.6's weights_only
    default refuses. mmengine's own reader does after ``import mmvitreg`` exactly what it does without (torch's
    allow-list is not widened); mmvitreg's reader reads the file with its allow-list, for that read."""
    ckpt = tmp_path / 'runner.pth'
    load = (
        f"from mmengine.runner import CheckpointLoader\nck = CheckpointLoader.load_checkpoint('{ckpt}')\n"
        "print('epoch', ck['meta']['epoch'])"
    )
    assert run_py(SAVE_RUNNER_STYLE_CHECKPOINT.replace('CKPT', str(ckpt))).returncode == 0
    plain, imported = run_py(load), run_py('import mmvitreg\n' + load)
    assert plain.returncode == imported.returncode
    assert plain.stdout.split(' - ')[-1:] == imported.stdout.split(' - ')[-1:]  # without its time stamp
    assert plain.stderr.strip().splitlines()[-1:] == imported.stderr.strip().splitlines()[-1:]
    assert (plain.returncode != 0 and 'weights_only' in plain.stderr) == TORCH_WEIGHTS_ONLY, plain.stderr
    ours = run_py(
        f"from mmvitreg.fileio import read_checkpoint\nprint('epoch', read_checkpoint('{ckpt}')['meta']['epoch'])"
    )
    assert ours.returncode == 0 and 'epoch 1' in ours.stdout, ours.stderr


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


def editable_install() -> bool:
    """Whether mmvitreg is installed editable (PEP 610 ``direct_url.json``), as the quick start installs it."""
    try:
        text = importlib.metadata.distribution('mmvitreg').read_text('direct_url.json') or '{}'
    except importlib.metadata.PackageNotFoundError:
        return False
    return bool(json.loads(text).get('dir_info', {}).get('editable'))


def test_mmvitreg_base_resolves_and_keeps_its_library_scope(tmp_path):
    """``_base_ = 'mmvitreg::...'``: mmengine 0.10 knows no package ``mmvitreg``; told only that, it
    looks the package up through ``pkg_resources``, which for an editable install (the quick start's, and this
    test environment's) answers the site-packages folder of pointers that its metafile reader cannot follow; told
    where the package is, it stamps ``_scope_='mmvitreg'`` on the inherited data set, which then is looked up in
    our registry, where mmpretrain's ``CustomDataset`` does not exist. With mmvitreg imported the base resolves
    from the imported package and its data set is mmpretrain's."""

    def run(setup):
        return run_py(MMVITREG_BASE.format(setup=setup, mine=tmp_path / 'mine.py'))

    unknown = run('')
    assert unknown.returncode != 0 and 'mmengine does not support to load mmvitreg config' in unknown.stderr
    if editable_install():
        told_the_name = run("from mmengine.config.utils import MODULE2PACKAGE\nMODULE2PACKAGE['mmvitreg'] = 'mmvitreg'")
        assert told_the_name.returncode != 0 and "KeyError: 'Models'" in told_the_name.stderr
    # mmengine told only the package and where it is (the checkout), without mmvitreg.compat
    stamped = run(
        "import importlib.util, os.path\nimport mmengine.config.config as cc\n"
        "from mmengine.config.utils import MODULE2PACKAGE\nMODULE2PACKAGE['mmvitreg'] = 'mmvitreg'\n"
        "cc.is_installed = lambda package: True\n"
        "cc.get_installed_path = lambda package: os.path.dirname(importlib.util.find_spec(package).origin)"
    )
    assert stamped.returncode == 0, stamped.stderr
    assert stamped.stdout.split('\n')[-2] == 'mmpretrain mmvitreg None'  # sent to our scope: not found
    fixed = run('import mmvitreg')
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.split('\n')[-2] == 'mmpretrain mmpretrain CustomDataset'
