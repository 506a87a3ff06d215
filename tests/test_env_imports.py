"""The package in environments it does not choose (issue 30.3, 32.6, 37, 42): a transformers 5 installed beside
mmpretrain 1.2.0 (every tool, and every process it starts, imports mmvitreg first), no pycocotools, no scikit-learn,
mmcv without its compiled ops (mmcv-lite: mmvitreg/mmcv_ops.py serves them), a classification install without mmseg
and mmdet; and a classification
import that leaves mmseg and mmdet alone. Each runs in a fresh interpreter, the environment faked before anything
imports."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import CONFIGS, REPO, TOOLS, needs_compiled_ops, tool_env
from packaging.version import Version

from mmvitreg import compat

DEMO = CONFIGS / 'demo' / 'deit-tiny_1xb64_digits.py'
SEG_DEMO = CONFIGS / 'demo' / 'upernet_swin-nano_1xb8-300_digits-ade20k-128x128.py'
DET_DEMO = CONFIGS / 'demo' / 'cascade-mask-rcnn_swin-nano_fpn_1xb4-4e_digits-coco.py'
SMALL = [
    'train_cfg.max_epochs=1',
    'train_dataloader.dataset.indices=64',
    'val_dataloader.dataset.indices=32',
    'test_dataloader.dataset.indices=32',
    'train_dataloader.batch_size=16',
    'train_dataloader.num_workers=0',
    'val_dataloader.num_workers=0',
    'test_dataloader.num_workers=0',
]
MULTIMODAL_WARNING = "'s multimodal models (BLIP, CLIP, Flamingo, ...) need transformers < 5"


def run_py(code, path=(), cwd=None, timeout=300):
    """``python -c code`` with ``path`` first on ``PYTHONPATH`` (so a ``sitecustomize.py`` there runs first)."""
    env = tool_env()
    env['PYTHONPATH'] = os.pathsep.join([*map(str, path), env['PYTHONPATH']])
    return subprocess.run(
        [sys.executable, '-c', textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


# --- transformers 5 beside mmpretrain 1.2.0 --------------------------------------------------------------------

STAND_IN_TRANSFORMERS = '''"""A stand-in for transformers {version}: every name of it and of its submodules imports, and
``PreTrainedModel`` is None, unusable as the real one is to mmpretrain 1.2.0 beside transformers 5: mmpretrain's
models raise a TypeError using it (the real one: ``TypeError: NoneType takes no arguments`` where BLIP subclasses
it), which a fork server's preload does not swallow, where it would swallow an ImportError."""
import importlib.abc
import importlib.machinery
import sys

__version__ = {version!r}
PreTrainedModel = None


class _Anything(type):
    """A class for any name: it can be called, subclassed, used as a decorator, and has any attribute."""

    def __getattr__(cls, name):
        if name.startswith('__'):
            raise AttributeError(name)
        return _anything(name)

    def __call__(cls, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _anything('result')


def _anything(name):
    return _Anything(name, (), {{}})


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    return None if name == 'PreTrainedModel' else _anything(name)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every ``transformers.x.y`` imports, as a package whose names are those of :func:`__getattr__`."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith(__name__ + '.'):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = __getattr__
        module.PreTrainedModel = None


sys.meta_path.insert(0, _Submodules())
'''


def fake_transformers(root, version):
    """A ``transformers`` distribution of ``version`` under ``root``: its metadata (what mmpretrain's
    ``WITH_MULTIMODAL`` reads) and the package :data:`STAND_IN_TRANSFORMERS`."""
    info = root / f'transformers-{version}.dist-info'
    info.mkdir(parents=True)
    (info / 'METADATA').write_text(f'Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n')
    (root / 'transformers').mkdir()
    (root / 'transformers' / '__init__.py').write_text(STAND_IN_TRANSFORMERS.format(version=version))
    return root


def test_the_stand_in_transformers_5_breaks_mmpretrain_models_alone_with_a_type_error(tmp_path):
    """The control: beside pycocotools (installed: the tests need it) and the stand-in transformers 5, every name
    of which imports, ``import mmpretrain.models`` without mmvitreg raises the TypeError the real one raises (no
    startup finder either: mmcv's bricks probe ``mmcv.ops``, which would import mmvitreg through it)."""
    proc = run_py(
        '''
        from transformers.modeling_utils import apply_chunking_to_forward, prune_linear_layer  # any name imports
        import pycocotools
        import mmpretrain.models
    ''',
        [fake_transformers(tmp_path, '5.24.0'), hiding(tmp_path / 'no_finder', 'mmcv._ext')],
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith('TypeError: '), proc.stderr[-3000:]
    assert 'PreTrainedModel' in proc.stderr[-1500:] and 'ImportError' not in proc.stderr, proc.stderr[-3000:]


def test_the_step_benchmark_s_fork_server_imports_mmvitreg_before_mmpretrain_models(tmp_path):
    """The peak-memory pass on the CPU runs in processes of a fork server that preloads mmpretrain's models: with
    the stand-in transformers 5 it still ends with its table, as the fork server applies mmvitreg's patch first."""
    env = tool_env()
    env['PYTHONPATH'] = os.pathsep.join([str(fake_transformers(tmp_path, '5.24.0')), env['PYTHONPATH']])
    proc = subprocess.run(
        [
            sys.executable,
            str(TOOLS / 'analysis_tools' / 'benchmark_train_step.py'),
            '--case',
            'deit-s-tlalign-vs-cutmix',
            '--tiny',
            '--memory',
            'forkserver',
            '--repeats',
            '1',
            '--warmup',
            '1',
            '--batch-size',
            '2',
            '--img-size',
            '32',
            '--threads',
            '1',
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = [ln for ln in proc.stdout.splitlines() if ln.startswith('| deit-s-tlalign-vs-cutmix |')]
    assert row, proc.stdout[-3000:]
    cells = [c.strip() for c in row[-1].strip('|').split('|')]
    # the model's and the baseline's peak GiB, measured in the fork server's processes (op counts are not asked for)
    assert cells[3] != 'n/a' and cells[7] != 'n/a', row[-1]
    assert 'TypeError' not in proc.stderr and 'EOFError' not in proc.stderr


def test_transformers_5_turns_mmpretrain_multimodal_models_off_with_one_warning(tmp_path):
    proc = run_py(
        '''
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            import mmvitreg
            import mmpretrain.models
            import mmvitreg.models
            from mmvitreg import compat
            compat.apply()  # idempotent: no second warning
        from mmpretrain.registry import MODELS
        try:
            MODELS.build(dict(type='BlipCaption'))
        except ImportError as e:
            blip = str(e)
        classifier = MODELS.build(dict(type='ImageClassifier', backbone=dict(
            type='mmvitreg.VisionTransformer', arch=dict(embed_dims=32, num_layers=1, num_heads=2,
            feedforward_channels=64), img_size=32, patch_size=8)))
        print(json.dumps(dict(applied=compat.applied(), blip=blip, classifier=type(classifier).__name__,
                              warnings=[str(w.message) for w in caught if "multimodal" in str(w.message)])))
    ''',
        [fake_transformers(tmp_path, '5.0.0')],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert 'multimodal_off' in out['applied']
    assert len(out['warnings']) == 1, out['warnings']
    assert MULTIMODAL_WARNING in out['warnings'][0] and 'transformers 5.0.0 is installed' in out['warnings'][0]
    assert f'mmpretrain {compat.installed_version("mmpretrain")}' in out['warnings'][0]
    assert 'requires extra multi-modal dependencies' in out['blip']  # mmpretrain's own placeholder
    assert out['classifier'] == 'ImageClassifier'


def test_every_tool_imports_mmvitreg_before_a_host_model_package():
    """Each script under ``tools/`` that imports mmpretrain, mmseg or mmdet at its top level imports ``mmvitreg``
    (which applies the compat patches) before it, so transformers 5 cannot break the first host import."""
    import ast

    late = []
    for tool in sorted(TOOLS.rglob('*.py')):
        for node in ast.parse(tool.read_text()).body:
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or '']
                if isinstance(node, ast.ImportFrom)
                else []
            )
            tops = {n.split('.')[0] for n in names}
            if 'mmvitreg' in tops:
                break
            if tops & {'mmpretrain', 'mmseg', 'mmdet'}:
                late.append(f'{tool.relative_to(TOOLS)}:{node.lineno}')
                break
    assert not late, late


@pytest.mark.parametrize('version', [None, '4.40.0'])
def test_without_transformers_5_nothing_is_patched(tmp_path, version):
    path = [fake_transformers(tmp_path, version)] if version else []
    proc = run_py(
        '''
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            import mmvitreg
        from mmvitreg import compat
        from mmpretrain.utils import dependency
        own = all(dependency.satisfy_requirement(r) for r in ('pycocotools', 'transformers>=4.28.0'))
        print(json.dumps([compat.applied(), [str(w.message) for w in caught if 'multimodal' in str(w.message)],
                          dependency.WITH_MULTIMODAL == own]))
    ''',
        path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    applied, warned, unchanged = json.loads(proc.stdout.splitlines()[-1])
    assert 'multimodal_off' not in applied and warned == [] and unchanged


@pytest.mark.parametrize(
    'versions, expected',
    [
        (dict(mmpretrain='1.2.0', pycocotools='2.0.11', transformers='5.0.0'), True),
        (dict(mmpretrain='1.2.0', pycocotools='2.0.11', transformers='4.57.1'), False),
        (dict(mmpretrain='1.2.0', transformers='5.0.0'), False),  # no pycocotools: mmpretrain keeps them off itself
        (dict(mmpretrain='1.3.0', pycocotools='2.0.11', transformers='5.0.0'), False),  # a release that may fix it
    ],
)
def test_multimodal_gate_reads_the_installed_versions(monkeypatch, versions, expected):
    monkeypatch.setattr(compat, 'installed_version', {k: Version(v) for k, v in versions.items()}.get)
    assert next(p for p in compat.PATCHES if p.name == 'multimodal_off').needed() is expected


# --- no pycocotools, no mmcv ops --------------------------------------------------------------------------------

HIDE = '''
import sys
from importlib.machinery import PathFinder

HIDDEN = {hidden!r}
HIDDEN_DISTRIBUTIONS = {distributions!r}


class Hide(PathFinder):
    """The path finder, blind to the hidden modules and their submodules: they are absent, as in an environment
    without them (an import raises ModuleNotFoundError, ``importlib.util.find_spec`` answers None)."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if any(name == h or name.startswith(h + '.') for h in HIDDEN):
            return None
        return super().find_spec(name, path, target)


sys.meta_path[sys.meta_path.index(PathFinder)] = Hide

# A hidden mmcv._ext is an environment where mmcv has no compiled ops and mmvitreg's startup finder does not run (its
# .pth runs only where mmvitreg is pip-installed: not for a checkout on PYTHONPATH or a --target install); an
# `import mmvitreg` puts the finder back.
if 'mmcv._ext' in HIDDEN:
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != '_mmvitreg_mmcv_ext']

if HIDDEN_DISTRIBUTIONS:  # and ``importlib.metadata`` finds none of them, whichever finder it asks (the
    import importlib.metadata  # importlib_metadata backport adds one of its own to sys.meta_path)

    discover = importlib.metadata.Distribution.discover.__func__

    def discover_visible(cls, *args, **kwargs):
        return (d for d in discover(cls, *args, **kwargs)
                if (d.metadata['Name'] or '').lower() not in HIDDEN_DISTRIBUTIONS)

    importlib.metadata.Distribution.discover = classmethod(discover_visible)
'''


def hiding(folder, *modules, distributions=()):
    """A folder whose ``sitecustomize.py`` hides ``modules`` (and the metadata of ``distributions``) from every
    interpreter started with it on the path."""
    folder.mkdir()
    (folder / 'sitecustomize.py').write_text(HIDE.format(hidden=modules, distributions=distributions))
    return folder


def test_classification_imports_without_pycocotools_and_builds_its_data(tmp_path):
    """``pycocotools`` is imported only where COCO data is built or read: the package, its models and the
    ImageNet-layout digits build without it; the COCO builder is what asks for it."""
    proc = run_py(
        f'''
        import sys
        sys.path.insert(0, {str(TOOLS / 'dataset_converters')!r})
        import mmvitreg.datasets, mmvitreg.models, mmvitreg.engine
        from digits import build_coco, build_imagenet
        print(build_imagenet({str(tmp_path / 'imagenet')!r}, num_train=20, num_val=10)['images'])
        try:
            build_coco({str(tmp_path / 'coco')!r}, num_train=2, num_val=1)
        except ImportError as e:
            print('coco:', e)
    ''',
        [hiding(tmp_path / 'site', 'pycocotools')],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "{'train': 20, 'val': 10}" in proc.stdout and "coco: No module named 'pycocotools'" in proc.stdout


def test_digits_classification_trains_and_tests_without_mmcv_ops_or_pycocotools(tmp_path):
    """mmcv-lite (no compiled ``mmcv._ext``) and no pycocotools: the quick start's classification config trains
    and tests through ``tools/train.py`` and ``tools/test.py``, and the step benchmark runs."""
    site = hiding(tmp_path / 'site', 'mmcv._ext', 'pycocotools')
    check = run_py(
        '''
        for name in ('mmcv._ext', 'pycocotools'):
            try:
                __import__(name)
            except ImportError:
                print('hidden', name)
    ''',
        [site],
    )
    assert check.stdout.split('\n')[:2] == ['hidden mmcv._ext', 'hidden pycocotools']

    env = tool_env()
    env['PYTHONPATH'] = os.pathsep.join([str(site), env['PYTHONPATH']])

    def tool(*args):
        proc = subprocess.run(
            [sys.executable, str(TOOLS / args[0]), *map(str, args[1:])],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, f'{args[0]}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}'
        return proc

    tool('dataset_converters/digits.py', 'imagenet', '--out', 'data', '--num-train', 64, '--num-val', 32)
    tool('train.py', DEMO, '--work-dir', 'work', '--cfg-options', *SMALL)
    checkpoint = (tmp_path / 'work' / 'last_checkpoint').read_text().strip()
    test = tool('test.py', DEMO, checkpoint, '--work-dir', 'work', '--cfg-options', *SMALL[2:])
    metrics = json.loads([ln for ln in test.stdout.splitlines() if ln.startswith('metrics: ')][-1][9:])
    assert 0.0 <= metrics['accuracy/top1'] <= 100.0
    bench = tool(
        'analysis_tools/benchmark_train_step.py',
        '--case',
        'deit-s-tlalign-vs-cutmix',
        '--tiny',
        '--memory',
        'off',
        '--repeats',
        2,
        '--warmup',
        1,
        '--batch-size',
        2,
        '--img-size',
        32,
    )
    assert 'deit-s-tlalign-vs-cutmix' in bench.stdout and 'images/s' in bench.stdout


def test_a_detection_run_without_mmcv_ops_trains_on_the_stand_in_and_says_so(tmp_path):
    """No compiled ``mmcv._ext`` (mmcv-lite): ``tools/train.py`` trains the Cascade Mask R-CNN digits demo (RPN
    nms, RoIAlign forward and backward, mask targets) on mmvitreg/mmcv_ops.py and logs that it does."""
    from mmvitreg.mmcv_ops import PROVIDED

    env = tool_env()
    env['PYTHONPATH'] = os.pathsep.join([str(hiding(tmp_path / 'site', 'mmcv._ext')), env['PYTHONPATH']])
    subprocess.run(
        [
            sys.executable,
            str(TOOLS / 'dataset_converters' / 'digits.py'),
            'coco',
            '--out',
            'data',
            '--num-train',
            '2',
            '--num-val',
            '1',
        ],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(TOOLS / 'train.py'),
            str(DET_DEMO),
            '--work-dir',
            'work',
            '--no-validate',
            '--cfg-options',
            'train_cfg.max_epochs=1',
            'train_dataloader.batch_size=2',
            'train_dataloader.num_workers=0',
            'train_dataloader.persistent_workers=False',
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = next((tmp_path / 'work').glob('*/*.log')).read_text()
    assert "mmcv ops: torchvision " in log and f"({', '.join(PROVIDED)}; no compiled mmcv._ext here)" in log
    assert 's2.loss_mask' in log and (tmp_path / 'work' / 'epoch_1.pth').is_file()


@pytest.mark.parametrize('config, library, extra', [(SEG_DEMO, 'mmseg', 'seg'), (DET_DEMO, 'mmdet', 'det')])
def test_a_dense_config_without_its_library_stops_with_one_line_naming_the_extra(tmp_path, config, library, extra):
    """A classification install (``pip install mmvitreg``: no mmsegmentation, no mmdet): ``tools/train.py`` on an
    mmseg or mmdet config stops with one line naming the extra that installs its library, and mmvitreg's component
    built on that library, asked for by name, raises an ImportError naming the same."""
    site = hiding(tmp_path / 'site', 'mmseg', 'mmdet', distributions=('mmsegmentation', 'mmdet'))
    env = tool_env()
    env['PYTHONPATH'] = os.pathsep.join([str(site), env['PYTHONPATH']])
    proc = subprocess.run(
        [sys.executable, str(TOOLS / 'train.py'), str(config), '--work-dir', 'work'],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode != 0
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]  # (mmcv-lite may warn before it)
    assert proc.stderr.strip().splitlines()[-1] == (
        f'error: {config} is a config of {library}, which is not installed: pip install "{REPO}[{extra}]"'
    ), proc.stderr[-3000:]
    assert not (tmp_path / 'work').exists()

    component = 'TokenSegmentor' if library == 'mmseg' else 'TokenCascadeRCNN'
    built = run_py(
        f'''
        import mmvitreg.models
        from mmvitreg.registry import MODELS
        try:
            MODELS.build(dict(type={component!r}))
        except ImportError as e:
            print(e)
    ''',
        [site],
    )
    assert built.returncode == 0, built.stderr[-3000:]
    message = built.stdout.strip().splitlines()[-1]
    assert message.startswith(f"mmvitreg.{component} is built on {library}'s models, which do not import here")
    assert message.endswith(f'; pip install "{REPO}[{extra}]"'), message


def test_the_digits_builder_without_scikit_learn_says_what_to_install(tmp_path):
    """scikit-learn is no requirement of the package (the digits builder's alone): without it the builder stops
    with one line naming it."""
    env = tool_env()
    env['PYTHONPATH'] = os.pathsep.join([str(hiding(tmp_path / 'site', 'sklearn')), env['PYTHONPATH']])
    proc = subprocess.run(
        [
            sys.executable,
            str(TOOLS / 'dataset_converters' / 'digits.py'),
            'imagenet',
            '--out',
            'data',
            '--num-train',
            '4',
            '--num-val',
            '2',
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "imagenet: No module named 'sklearn': the digits are scikit-learn's bundled scans; pip install scikit-learn"
    ), proc.stderr[-3000:]


# --- classification leaves mmseg and mmdet alone ----------------------------------------------------------------


@pytest.mark.parametrize('first', ['mmvitreg', pytest.param('mmpretrain', marks=needs_compiled_ops)])
def test_classification_import_leaves_mmseg_and_mmdet_until_a_dense_model_is_asked_for(first):
    """``import mmvitreg.models`` imports nothing of mmseg and nothing of mmdet beyond what ``import
    mmpretrain.models`` imports itself (mmpretrain 1.2.0's ``ResLayerExtraNorm`` tries mmdet's ``ResLayer``); the
    segmentor and detectors still resolve by name from ``mmvitreg.registry`` and from mmseg's and mmdet's
    registries, importing their library then. With ``import mmvitreg`` first (as every tool), on any mmcv; with
    mmpretrain's models first, only on compiled mmcv: they import mmcv's transformer bricks, which look for
    ``mmcv.ops`` once, and on mmcv-lite without the stand-in in place they lose the ``MultiScaleDeformableAttention``
    mmdet's models import."""
    proc = run_py(f'''
        import json, sys
        hosts = lambda: sorted(m for m in sys.modules if m.split('.')[0] in ('mmseg', 'mmdet'))
        import {first}
        import mmpretrain.models
        out = dict(mmpretrain=hosts())
        import mmvitreg.models
        out['mmvitreg'] = hosts()
        from mmvitreg.registry import MODELS
        MODELS.import_from_location()
        out['locations'] = hosts()
        out['segmentor'] = MODELS.get('TokenSegmentor').__name__
        from mmseg.registry import MODELS as SEG
        from mmdet.registry import MODELS as DET
        out['from_mmseg'] = SEG.get('mmvitreg.TokenSegmentor').__name__
        out['from_mmdet'] = DET.get('mmvitreg.TokenCascadeRCNN').__name__
        print(json.dumps(out))
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out['mmvitreg'] == out['locations'] == out['mmpretrain']
    assert not [m for m in out['mmvitreg'] if m.startswith('mmseg')]
    assert out['segmentor'] == out['from_mmseg'] == 'TokenSegmentor'
    assert out['from_mmdet'] == 'TokenCascadeRCNN'


def test_mmvitreg_models_alone_imports_no_mmseg():
    proc = run_py('''
        import sys
        import mmvitreg.models
        print(sorted(m for m in sys.modules if m.startswith(('mmseg', 'mmvitreg.models.segmentors',
                                                           'mmvitreg.models.detectors'))))
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == '[]'
