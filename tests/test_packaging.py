"""The package as a researcher gets it: the wheel built from this checkout, installed (not editable)
into a scratch folder next to the stack, and used from a folder outside the repository - configs of
one's own that inherit ``mmvitreg::<folder>/<file>.py``, ``mim train/test mmvitreg`` running the
packaged tools, and the model index that ``mim search`` reads, all from ``mmvitreg/.mim/``. And the
quick start's editable install of this checkout, where ``mim`` finds the same through the pointers
``setup.py`` puts in ``<site-packages>/mmvitreg/.mim``."""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import REPO
from packaging.requirements import Requirement

# what a checkout holds that the sdist / wheel are not built from
TOP_LEVEL_SKIP = {'.git', 'data', 'work_dirs', 'build', 'dist', '.venv', '.whl', '.gl'}
ANYWHERE_SKIP = shutil.ignore_patterns('__pycache__', '*.pyc', '*.egg-info', '.pytest_cache')
# the quick start's config and the slice of the digits set that keeps a run at seconds
DEMO = 'deit-tiny_1xb64_digits.py'
SMALL = [
    'train_cfg.max_epochs=1',
    'train_dataloader.dataset.indices=128',
    'val_dataloader.dataset.indices=64',
    'test_dataloader.dataset.indices=64',
    'train_dataloader.num_workers=0',
    'val_dataloader.num_workers=0',
    'test_dataloader.num_workers=0',
]


def _ignore(directory, names):
    skip = set(ANYWHERE_SKIP(directory, names))
    if Path(directory) == REPO:
        skip |= TOP_LEVEL_SKIP & set(names)
    return skip


def outside_env(site):
    """The environment of a user's shell: the installed wheel first, the stack, and not this checkout."""
    keep = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p and Path(p).resolve() != REPO]
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *keep]), OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')


def run_outside(args, installed, cwd, timeout=300):
    proc = subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=cwd,
        env=outside_env(installed.site),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f'{args} exited {proc.returncode}\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}'
    return proc


def pip(*args):
    cmd = [sys.executable, '-m', 'pip', '--disable-pip-version-check', '-q', *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (
        f'{" ".join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}'
    )


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    """``pip wheel`` of a copy of this checkout, ``pip install --target`` of that wheel."""
    root = tmp_path_factory.mktemp('packaging')
    src = root / 'src'
    shutil.copytree(REPO, src, symlinks=True, ignore=_ignore)
    site = root / 'site'
    pip('wheel', src, '--no-deps', '--no-build-isolation', '-w', root / 'dist')
    (wheel,) = (root / 'dist').glob('mmvitreg-*.whl')
    pip('install', '--no-deps', '--no-compile', '--target', site, wheel)
    user = root / 'my_project'  # a researcher's own folder, outside the repository
    user.mkdir()
    return SimpleNamespace(wheel=wheel, site=site, mim=site / 'mmvitreg' / '.mim', user=user)


def repo_files(folder):
    return {
        p.relative_to(REPO).as_posix()
        for p in (REPO / folder).rglob('*')
        if p.is_file() and '__pycache__' not in p.parts and p.suffix != '.pyc'
    }


def test_wheel_ships_configs_tools_and_model_index_as_real_files(installed):
    """The wheel holds every config, tool and the model index under ``mmvitreg/.mim/`` (copies, not
    the checkout's links), and declares ranges, not the quick start's pins."""
    with zipfile.ZipFile(installed.wheel) as whl:
        names = set(whl.namelist())
        metadata = whl.read(next(n for n in names if n.endswith('.dist-info/METADATA'))).decode()
        links = [i.filename for i in whl.infolist() if (i.external_attr >> 16) & 0o170000 == 0o120000]
    shipped = {n[len('mmvitreg/.mim/') :] for n in names if n.startswith('mmvitreg/.mim/')}
    assert shipped == repo_files('configs') | repo_files('tools') | {'model-index.yml'}
    assert not links and not any('__pycache__' in n for n in names)
    assert not installed.mim.is_symlink() and (installed.mim / 'tools' / 'train.py').is_file()
    # the startup hook (tests below) at the top of site-packages, beside the module it imports
    assert {'_mmvitreg_mmcv_ext.pth', '_mmvitreg_mmcv_ext.py'} <= names

    requires = re.findall(r'^Requires-Dist: (.+)$', metadata, re.M)
    core = [r for r in requires if 'extra ==' not in r]
    assert core and not [r for r in core if '==' in r], core
    for name in ('torch', 'torchvision', 'mmengine', 'mmpretrain', 'numpy'):
        assert any(re.match(rf'{name}\s*[<>]', r) for r in core), (name, core)
    # `pip install /path/to/mmvitreg` is classification: mmseg, mmdet and what they pull in are the extras
    assert not [r for r in core if re.match(r'(mmsegmentation|mmdet|pycocotools|ftfy|regex)\b', r)], core
    extras = {
        name: sorted(re.match(r'[\w-]+', r).group() for r in requires if f'extra == "{name}"' in r)
        for name in ('seg', 'det', 'all', 'mim')
    }
    assert extras == {
        'seg': ['ftfy', 'mmsegmentation', 'regex'],
        'det': ['mmdet', 'pycocotools'],
        'all': ['ftfy', 'mmdet', 'mmsegmentation', 'pycocotools', 'regex'],
        'mim': ['openmim'],
    }, extras
    # mmcv: the installed `mmcv` as it is where there is one, else mmcv-lite in mmcv's range (setup.py), and no extra
    # that would add mmcv beside that mmcv-lite
    assert [str(Requirement(r)) for r in core if re.match(r'mmcv\b', r)] == [the_mmcv_requirement_here()], core
    assert not [r for r in requires if re.match(r'mmcv\b', r) and 'extra ==' in r], requires
    assert 'Requires-Python: >=3.10' in metadata
    assert re.findall(r'^Classifier: Programming Language :: Python :: (3\.\d+)$', metadata, re.M) == [
        '3.10',
        '3.11',
        '3.12',
    ]


def the_mmcv_requirement_here():
    """The Requires-Dist line of mmcv that a wheel built in this environment carries."""
    import importlib.metadata as md

    try:
        md.distribution('mmcv')
        return 'mmcv'
    except md.PackageNotFoundError:
        return f'mmcv-lite{read_requirements("mminstall.txt")["mmcv"].specifier}'


def run_setup_py(monkeypatch):
    """``setup.py``'s namespace and the arguments it gives ``setuptools.setup`` (which is not run)."""
    import runpy

    import setuptools

    given = {}
    monkeypatch.setattr(setuptools, 'setup', lambda **kwargs: given.update(kwargs))
    return runpy.run_path(str(REPO / 'setup.py'), run_name='setup_under_test'), given


def test_mmcv_requirement_keeps_an_installed_mmcv_and_else_asks_for_mmcv_lite(tmp_path, monkeypatch):
    """mmcv and mmcv-lite are one ``mmcv`` package to pip: setup.py asks for the ``mmcv`` distribution that the
    interpreter running pip has (any version: it is kept, never rebuilt or overwritten), else for mmcv-lite in mmcv's
    range, also when mmcv-lite is installed. It asks that interpreter itself, past the ``PYTHONPATH`` with which
    pip's isolated build hides the environment's site-packages (here a ``sitecustomize`` that empties them)."""
    namespace, given = run_setup_py(monkeypatch)
    # the choice is a requirement of the package
    assert the_mmcv_requirement_here() in [str(Requirement(r)) for r in given['install_requires']]
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv], check=True, timeout=120)
    (site,) = venv.glob('lib/python*/site-packages')
    isolation = tmp_path / 'isolation'
    isolation.mkdir()
    (isolation / 'sitecustomize.py').write_text(
        "import sys\nsys.path[:] = [p for p in sys.path if 'site-packages' not in p]\n"
    )
    monkeypatch.setenv('PYTHONPATH', str(isolation))
    monkeypatch.setattr(sys, 'executable', str(venv / 'bin' / 'python'))
    lite = f'mmcv-lite{read_requirements("mminstall.txt")["mmcv"].specifier}'

    def install(name):
        info = site / f'{name.replace("-", "_")}-2.1.0.dist-info'
        info.mkdir()
        (info / 'METADATA').write_text(f'Metadata-Version: 2.1\nName: {name}\nVersion: 2.1.0\n')

    choose = namespace['mmcv_requirement']
    assert str(Requirement(choose())) == lite  # nothing installed
    install('mmcv-lite')
    assert str(Requirement(choose())) == lite
    install('mmcv')
    assert choose() == 'mmcv'


def test_model_index_and_metafiles_are_found_in_the_installed_package(installed):
    """``mmvitreg/.mim/model-index.yml`` imports every paper's metafile, every model's ``Config`` is
    shipped, and mim reads the index from the installed package (``mim search mmvitreg``)."""
    index = yaml.safe_load((installed.mim / 'model-index.yml').read_text())
    metafiles = sorted(p.relative_to(REPO).as_posix() for p in (REPO / 'configs').glob('*/metafile.yml'))
    assert sorted(index['Import']) == metafiles
    models = {}
    for metafile in index['Import']:
        for model in yaml.safe_load((installed.mim / metafile).read_text())['Models']:
            assert (installed.mim / model['Config']).is_file(), model['Config']
            models[model['Name']] = model['Config']
    assert 'lvvit-s_8xb128_tl_in1k' in models and 'deepvit-s_8xb32_in1k' in models

    found = run_outside(['-m', 'mim', 'search', 'mmvitreg'], installed, installed.user).stdout
    assert mim_search_ids(found) == sorted(models)


def mim_search_ids(stdout):
    """The model names ``mim search`` printed (one ``config id: NAME`` line per model)."""
    return sorted(re.findall(r'^config id: (\S+)$', stdout, re.M))


BUILD_OUTSIDE = '''
import json, sys
import mmvitreg
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope


def scopes(node):
    if isinstance(node, dict):
        return {node.get('_scope_')} | set().union(*map(scopes, node.values()))
    if isinstance(node, (list, tuple)):
        return set().union(*map(scopes, node))
    return set()


out = {'mmvitreg': mmvitreg.__file__}
for arg in sys.argv[1:]:
    path, build = arg.split(':')
    cfg = Config.fromfile(path)
    init_default_scope(cfg.default_scope)
    model = MODELS.build(cfg.model) if build == 'build' else None
    out[path] = dict(default_scope=cfg.default_scope, scopes=sorted(map(str, scopes(cfg._cfg_dict.to_dict()))),
                     backbone=cfg.model.backbone.type, model=type(model).__name__,
                     head_classes=cfg.model.get('head', cfg.model.get('decode_head', {})).get('num_classes'))
print(json.dumps(out))
'''
USER_CONFIGS = {
    'my_lvvit.py': ("_base_ = 'mmvitreg::lvvit/lvvit-s_8xb128_tl_in1k.py'\nmodel = dict(head=dict(num_classes=37))\n"),
    'my_deepvit.py': (
        "_base_ = 'mmvitreg::deepvit/deepvit-s_8xb32_in1k.py'\nmodel = dict(head=dict(num_classes=37))\n"
    ),
    'my_upernet.py': (
        "_base_ = 'mmvitreg::deepvit/upernet_deepvit-s_mln_8xb2-160k_ade20k-512x512.py'\n"
        "model = dict(decode_head=dict(num_classes=37), auxiliary_head=dict(num_classes=37))\n"
    ),
}


def build_outside(installed, parse_only=(), build=()):
    """Parse (and build the model of) the named user configs in one interpreter outside the repo."""
    for name in (*parse_only, *build):
        (installed.user / name).write_text(USER_CONFIGS[name])
    args = [f'{n}:parse' for n in parse_only] + [f'{n}:build' for n in build]
    proc = run_outside(['-c', BUILD_OUTSIDE, *args], installed, installed.user)
    out = json.loads(proc.stdout.splitlines()[-1])
    assert Path(out.pop('mmvitreg')).parent == installed.site / 'mmvitreg'  # the wheel, not the checkout
    return out


def test_own_configs_outside_the_repository_inherit_lvvit_deepvit_and_upernet(installed):
    """Three configs in a folder of one's own, each inheriting one of ours with ``mmvitreg::``, parse
    with our library's default scope and no ``_scope_='mmvitreg'`` stamp; the LV-ViT and DeepViT
    classifiers build (the UperNet model needs mmcv's ops: next test)."""
    out = build_outside(installed, parse_only=['my_upernet.py'], build=['my_lvvit.py', 'my_deepvit.py'])
    assert {n: (o['default_scope'], o['backbone'], o['head_classes']) for n, o in out.items()} == {
        'my_lvvit.py': ('mmpretrain', 'mmvitreg.LVViT', 37),
        'my_deepvit.py': ('mmpretrain', 'mmvitreg.DeepViT', 37),
        'my_upernet.py': ('mmseg', 'mmvitreg.DeepViT', 37),
    }
    for o in out.values():
        assert 'mmvitreg' not in o['scopes'], o['scopes']
    assert {n: o['model'] for n, o in out.items()} == {
        'my_lvvit.py': 'TokenClassifier',
        'my_deepvit.py': 'ImageClassifier',
        'my_upernet.py': 'NoneType',
    }


def test_own_upernet_config_outside_the_repository_builds(installed):
    """The inherited DeepViT-S UperNet builds as mmseg's ``EncoderDecoder`` with our backbone."""
    out = build_outside(installed, build=['my_upernet.py'])
    assert out['my_upernet.py']['model'] == 'EncoderDecoder'


def test_mim_train_and_test_run_the_packaged_tools(installed, digits_workspace, tmp_path):
    """``mim train mmvitreg <config name>`` finds the config and ``train.py`` in the installed
    package and trains; ``mim test mmvitreg <own config>`` (inheriting ``mmvitreg::``) evaluates it."""
    work = tmp_path / 'work'
    train = run_outside(
        ['-m', 'mim', 'train', 'mmvitreg', DEMO, '--gpus', '0', '--work-dir', work, '--cfg-options', *SMALL],
        installed,
        digits_workspace,
        timeout=600,
    )
    assert f'{installed.mim}/configs/demo/{DEMO}' in train.stdout  # the config mim found
    assert f'{installed.mim}/tools/train.py' in train.stdout  # the script it ran
    ckpt = (work / 'last_checkpoint').read_text().strip()
    assert Path(ckpt).is_file()

    own = installed.user / 'my_digits.py'
    own.write_text(f"_base_ = 'mmvitreg::demo/{DEMO}'\n")
    test = run_outside(
        [
            '-m',
            'mim',
            'test',
            'mmvitreg',
            own,
            '--checkpoint',
            ckpt,
            '--gpus',
            '0',
            '--work-dir',
            tmp_path / 'test',
            '--cfg-options',
            *SMALL[1:],
        ],
        installed,
        digits_workspace,
        timeout=600,
    )
    assert f'{installed.mim}/tools/test.py' in test.stdout
    metrics = json.loads([ln for ln in test.stdout.splitlines() if ln.startswith('metrics: ')][-1][9:])
    assert 0.0 <= metrics['accuracy/top1'] <= 100.0


STUDIES_OUTSIDE = '''
import json, sys
from studies.claims import core, sections
from studies.train_step_benchmark import CASES
print(json.dumps(dict(root=str(core.ROOT), train=core._tool('train.py').__file__,
                      digits=core._tool('dataset_converters/digits.py').__file__,
                      sections=[s.name for s in sections()], cases=sorted(CASES))))
'''


def test_studies_reach_their_tools_from_the_wheel(installed, tmp_path):
    """The claims report's sections and the step benchmark's cases are not in the installed library but
    next to their tools in ``mmvitreg/.mim/tools/analysis_tools/studies``: from there the claims study
    finds the configs and imports the packaged ``train.py`` (not the checkout's), and both tools run."""
    with zipfile.ZipFile(installed.wheel) as whl:
        library = [n for n in whl.namelist() if n.startswith('mmvitreg/') and not n.startswith('mmvitreg/.mim/')]
    assert library and not [n for n in library if 'claims' in n or 'train_step_benchmark' in n]
    # nor the demo-data builders, the analysis tools' diagnostics or the troubleshooting catalogue (in tools/)
    assert not [
        n
        for n in library
        if n.endswith(
            ('/digits.py', '/troubleshooting.py', '_similarity.py', '/tl_align_diagnostics.py', '/loading.py')
        )
    ]
    tools = installed.mim / 'tools' / 'analysis_tools'
    env = dict(outside_env(installed.site))
    env['PYTHONPATH'] = os.pathsep.join([str(tools), env['PYTHONPATH']])
    proc = subprocess.run(
        [sys.executable, '-c', STUDIES_OUTSIDE],
        cwd=installed.user,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert Path(out['root']) == installed.mim and (installed.mim / 'configs' / 'demo' / DEMO).is_file()
    assert Path(out['train']) == installed.mim / 'tools' / 'train.py'
    assert Path(out['digits']) == installed.mim / 'tools' / 'dataset_converters' / 'digits.py'
    assert out['sections'] == ['deepvit', 'token_labeling', 'diversepatch', 'drloc', 'tl_align', 'dense']

    listed = run_outside([tools / 'benchmark_train_step.py', '--list'], installed, installed.user).stdout
    assert [ln.split(':')[0] for ln in listed.splitlines()] == out['cases']
    run_outside([tools / 'claims_report.py', '--assemble', '--out', tmp_path / 'docs'], installed, installed.user)
    text = (tmp_path / 'docs' / 'claims.md').read_text()
    assert len(re.findall(r'^## ', text, flags=re.M)) == 6 and text.count('*Not run yet:*') == 6


def test_library_loads_no_script_by_path():
    """Nothing in the installed ``mmvitreg`` package runs or imports a file by its path (the tools import
    the library, never the other way round)."""
    found = [
        f'{p.relative_to(REPO)}: {word}'
        for p in (REPO / 'mmvitreg').rglob('*.py')
        for word in ('run_path', 'spec_from_file_location', 'SourceFileLoader')
        if word in p.read_text()
    ]
    assert not found, found


def test_checkout_resolves_mmvitreg_configs_through_its_mim_links(tmp_path):
    """An editable install (or this checkout on PYTHONPATH) reads ``mmvitreg::`` from the working
    tree: ``mmvitreg/.mim/{configs,tools,model-index.yml}`` link to the top-level ones."""
    for item in ('configs', 'tools', 'model-index.yml'):
        link = REPO / 'mmvitreg' / '.mim' / item
        assert link.is_symlink() and link.resolve() == REPO / item
    own = tmp_path / 'mine.py'
    own.write_text("_base_ = 'mmvitreg::lvvit/lvvit-t_8xb128_tl_in1k.py'\n")
    from mmengine.config import Config

    import mmvitreg  # (registers the scope)

    assert Path(mmvitreg.__file__).parent == REPO / 'mmvitreg'
    cfg = Config.fromfile(own)
    assert cfg.model.backbone.arch == 't' and cfg.default_scope == 'mmpretrain'


def stack_venv(root):
    """A scratch venv that reaches the stack through a ``.pth`` (and so does not touch the stack's own mmvitreg):
    ``(python, site-packages)``."""
    venv = root / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv], check=True, timeout=120)
    (site,) = venv.glob('lib/python*/site-packages')
    stack = [p for p in sys.path if p.endswith('site-packages') and Path(p).is_dir()]
    (site / 'the_stack.pth').write_text('\n'.join(stack) + '\n')
    # the stack's setuptools provides `distutils` on Python >= 3.12 through a .pth of its own, which a .pth line
    # does not run: run it after the_stack.pth (mmengine's Runner imports distutils)
    shims = [Path(p) / 'distutils-precedence.pth' for p in stack if (Path(p) / 'distutils-precedence.pth').is_file()]
    if shims:
        (site / 'zz-distutils-precedence.pth').write_text(shims[0].read_text())
    return venv / 'bin' / 'python', site


def env_without_checkout():
    keep = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p and Path(p).resolve() != REPO]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(keep), OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')


@pytest.fixture(scope='module')
def editable(tmp_path_factory):
    """``pip install -e`` of this checkout (as the quick start makes it) into a :func:`stack_venv`."""
    python, site = stack_venv(tmp_path_factory.mktemp('editable'))
    pip('--python', python, 'install', '--no-deps', '--no-build-isolation', '--ignore-installed', '-e', REPO)
    return SimpleNamespace(python=python, site=site, env=env_without_checkout())


@pytest.fixture(scope='module')
def venv_installed(installed, tmp_path_factory):
    """The wheel ``pip install``-ed into a :func:`stack_venv`, as a user's environment has it: its ``.pth`` files
    run at every interpreter start (they do not in ``installed``'s ``--target`` folder)."""
    python, site = stack_venv(tmp_path_factory.mktemp('venv_installed'))
    pip('--python', python, 'install', '--no-deps', '--no-compile', '--ignore-installed', installed.wheel)
    return SimpleNamespace(python=python, site=site, env=env_without_checkout())


def run_editable(args, editable, cwd, timeout=600):
    proc = subprocess.run(
        [str(editable.python), *map(str, args)],
        cwd=cwd,
        env=editable.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f'{args} exited {proc.returncode}\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}'
    return proc


def test_mim_search_train_and_test_in_an_editable_install(editable, digits_workspace, tmp_path):
    """In the editable install the package is imported from the checkout, and ``mim search / train /
    test mmvitreg`` find the model index, the config by its name and the tools through the pointers in
    ``<site-packages>/mmvitreg/.mim``, each of which leads into the checkout."""
    where = run_editable(['-c', 'import mmvitreg; print(mmvitreg.__file__)'], editable, tmp_path)
    assert Path(where.stdout.strip()) == REPO / 'mmvitreg' / '__init__.py'
    mim = editable.site / 'mmvitreg' / '.mim'
    assert not (editable.site / 'mmvitreg' / '__init__.py').exists()
    assert str(REPO / 'configs' / 'demo' / DEMO) in (mim / 'configs' / 'demo' / DEMO).read_text()
    # a pointer for each tool, none for the modules the tools import from the checkout
    assert (
        str(REPO / 'tools' / 'analysis_tools' / 'claims_report.py')
        in (mim / 'tools' / 'analysis_tools' / 'claims_report.py').read_text()
    )
    assert not (mim / 'tools' / 'analysis_tools' / 'studies').exists()

    found = run_editable(['-m', 'mim', 'search', 'mmvitreg'], editable, tmp_path).stdout
    index = yaml.safe_load((REPO / 'model-index.yml').read_text())
    names = [m['Name'] for metafile in index['Import'] for m in yaml.safe_load((REPO / metafile).read_text())['Models']]
    assert mim_search_ids(found) == sorted(names)

    work = tmp_path / 'work'
    train = run_editable(
        ['-m', 'mim', 'train', 'mmvitreg', DEMO, '--gpus', '0', '--work-dir', work, '--cfg-options', *SMALL],
        editable,
        digits_workspace,
    )
    assert f'{mim}/configs/demo/{DEMO}' in train.stdout and f'{mim}/tools/train.py' in train.stdout
    ckpt = (work / 'last_checkpoint').read_text().strip()
    test = run_editable(
        [
            '-m',
            'mim',
            'test',
            'mmvitreg',
            DEMO,
            '--checkpoint',
            ckpt,
            '--gpus',
            '0',
            '--work-dir',
            tmp_path / 'test',
            '--cfg-options',
            *SMALL[1:],
        ],
        editable,
        digits_workspace,
    )
    assert f'{mim}/tools/test.py' in test.stdout
    metrics = json.loads([ln for ln in test.stdout.splitlines() if ln.startswith('metrics: ')][-1][9:])
    assert 0.0 <= metrics['accuracy/top1'] <= 100.0


def test_the_editable_install_serves_mmcv_ext_from_interpreter_start(editable, tmp_path):
    """The quick start's editable install gets the startup hook too: in its environment mmseg's and mmdet's models
    import with nothing of mmvitreg imported first (on mmcv-lite: the checkout's finder serves ``mmcv._ext``)."""
    assert (editable.site / '_mmvitreg_mmcv_ext.pth').is_file()
    code = (
        'import sys; import mmseg.models, mmdet.models, mmcv._ext, _mmvitreg_mmcv_ext as hook; '
        'print(hook.__file__); print(isinstance(mmcv._ext.__loader__, hook.StandIn))'
    )
    out = run_editable(['-c', code], editable, tmp_path).stdout.splitlines()
    from conftest import _compiled_mmcv_ops

    assert out == [str(REPO / '_mmvitreg_mmcv_ext.py'), str(not _compiled_mmcv_ops())], out


def own_dense_config(library, path):
    """A config of one's own for ``library``'s own ``tools/train.py``: one file (no ``mmvitreg::`` base, which needs
    mmvitreg imported), mmvitreg only as ``type='mmvitreg.SwinTransformer'``, 2 iterations on a digits set."""
    from mmengine.config import Config
    from seg_helpers import shrunk_config

    import mmvitreg  # noqa: F401  (reads the repository's configs)

    if library == 'mmseg':  # the Swin-T UperNet (mmseg's EncoderDecoder) shrunk, as the segmentation tests do
        shrunk_config(REPO / 'configs' / 'swin' / 'upernet_swin-t_8xb2-160k_ade20k-512x512.py', path)
        return path
    cfg = Config.fromfile(str(REPO / 'configs' / 'demo' / 'cascade-mask-rcnn_swin-nano_fpn_1xb4-4e_digits-coco.py'))
    cfg.optim_wrapper.type = 'OptimWrapper'  # the recipe's AmpOptimWrapper needs a GPU (mmvitreg's tools swap it)
    cfg.optim_wrapper.pop('loss_scale', None)
    cfg.train_cfg.update(max_epochs=1)
    cfg.train_dataloader.update(batch_size=2, num_workers=0, persistent_workers=False)
    cfg.train_dataloader.dataset.indices = 4
    cfg.dump(str(path))  # (.py: a .json dump turns the pipelines' tuples into lists, which they refuse)
    return path


@pytest.mark.parametrize(
    'library, layout, iteration', [('mmseg', 'ade20k', 'Iter(train) [2/2]'), ('mmdet', 'coco', 'Epoch(train) [1][2/2]')]
)
def test_the_libraries_own_train_scripts_run_mmvitreg_components_on_mmcv_lite(
    venv_installed, installed, tmp_path, library, layout, iteration
):
    """mmseg's and mmdet's own ``tools/train.py`` (as pip installs them: ``<library>/.mim/tools``), which import
    ``mmcv.ops`` long before their registry imports mmvitreg for ``type='mmvitreg.SwinTransformer'``, train a config
    of one's own in the environment the wheel was pip-installed into: its ``_mmvitreg_mmcv_ext.pth`` serves
    ``mmcv._ext`` from interpreter start. Without that file running (the ``--target`` install: no ``.pth`` runs
    there), the same run stops with ``No module named 'mmcv._ext'`` where mmcv has no compiled ops."""
    digits = REPO / 'tools' / 'dataset_converters' / 'digits.py'
    run_tool_outside = dict(cwd=tmp_path, capture_output=True, text=True, timeout=600)
    subprocess.run(
        [sys.executable, digits, layout, '--out', 'data', '--num-train', '4', '--num-val', '2'],
        check=True,
        env=venv_installed.env,
        **run_tool_outside,
    )
    config = own_dense_config(library, tmp_path / f'my_{library}.py')
    train = Path(__import__(library).__file__).parent / '.mim' / 'tools' / 'train.py'
    proc = subprocess.run(
        [venv_installed.python, train, config, '--work-dir', 'work'], env=venv_installed.env, **run_tool_outside
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert iteration in proc.stdout + proc.stderr

    from conftest import _compiled_mmcv_ops

    if not _compiled_mmcv_ops():
        from test_env_imports import hiding

        env = outside_env(installed.site)  # and no .pth: this test's own Python may hold mmvitreg pip-installed
        env['PYTHONPATH'] = os.pathsep.join([str(hiding(tmp_path / 'no_pth', 'mmcv._ext')), env['PYTHONPATH']])
        proc = subprocess.run([sys.executable, train, config, '--work-dir', 'work_target'], env=env, **run_tool_outside)
        assert proc.returncode != 0 and proc.stderr.strip().endswith("No module named 'mmcv._ext'"), proc.stderr[-3000:]


def test_the_startup_hook_imports_nothing_but_its_finder_and_serves_only_mmcv_ext(venv_installed):
    """The wheel's ``.pth`` runs at every start of the environment's Python: it imports one module of ``sys`` only
    (no torch, nothing of mmvitreg), puts its finder last on ``sys.meta_path``, and that finder answers only
    ``mmcv._ext``."""
    code = (
        'import sys, _mmvitreg_mmcv_ext as hook; print(sorted(m for m in sys.modules if "torch" in m or '
        '"mmvitreg" in m or "mmcv" in m)); print(isinstance(sys.meta_path[-1], hook.StandIn)); '
        'print(hook.StandIn().find_spec("mmcv.ops"), hook.StandIn().find_spec("mmcv._ext").name)'
    )
    proc = subprocess.run(
        [venv_installed.python, '-c', code], env=venv_installed.env, capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.splitlines() == ["['_mmvitreg_mmcv_ext']", 'True', 'None mmcv._ext'], proc.stderr[-3000:]
    hook = (venv_installed.site / '_mmvitreg_mmcv_ext.pth').read_text()
    assert 'import' in hook and '_mmvitreg_mmcv_ext' in hook and hook.count('\n') == 1


@pytest.mark.parametrize('module_there', [True, False])
def test_the_startup_hook_is_silent_where_its_module_is_gone(tmp_path, monkeypatch, module_there):
    """An editable install whose checkout moved leaves the ``.pth`` without its module: site runs the line at every
    start of that Python, so it must do nothing there rather than print a traceback; where the module is, it
    installs the finder."""
    name, line = run_setup_py(monkeypatch)[0]['STARTUP_HOOK']
    site_dir = tmp_path / 'site'
    site_dir.mkdir()
    (site_dir / name).write_text(line)
    if module_there:
        shutil.copy(REPO / '_mmvitreg_mmcv_ext.py', site_dir)
    code = (
        f'import site, sys; site.addsitedir({str(site_dir)!r}); '
        'print(any(type(f).__name__ == "StandIn" for f in sys.meta_path))'
    )
    proc = subprocess.run([sys.executable, '-S', '-c', code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (proc.stdout.strip(), proc.stderr) == (str(module_there), ''), proc.stderr[-3000:]


def test_pyproject_declares_a_pep_517_build_and_the_static_metadata():
    """``pyproject.toml`` names setuptools' PEP 517 backend (no legacy ``setup.py install`` on any pip) and the
    PEP 621 metadata; setup.py computes only what is ``dynamic`` (the dependencies: mmcv by what is installed)."""
    from setuptools.config.pyprojecttoml import load_file  # (Python 3.10 has no tomllib)

    project = load_file(REPO / 'pyproject.toml')
    assert project['build-system']['build-backend'] == 'setuptools.build_meta'
    assert any(r.startswith('setuptools') for r in project['build-system']['requires'])
    meta = project['project']
    assert (meta['name'], meta['version'], meta['requires-python']) == ('mmvitreg', '0.1.0', '>=3.10')
    assert set(meta['dynamic']) == {'dependencies', 'optional-dependencies', 'license'}
    assert project['tool']['setuptools']['py-modules'] == ['_mmvitreg_mmcv_ext']


def read_requirements(name):
    """``{distribution: Requirement}`` of ``requirements/<name>`` (its ``-r`` includes followed)."""
    found = {}
    for line in (REPO / 'requirements' / name).read_text().splitlines():
        line = line.split('#')[0].strip()
        if line.startswith('-r'):
            found.update(read_requirements(line[2:].strip()))
        elif line:
            req = Requirement(line)
            found[req.name.lower()] = req
    return found


def test_the_offline_wheelhouse_asks_for_the_package_s_ranges_and_never_for_torch():
    """``requirements/wheelhouse.txt`` (docs/gpu.md, the offline GPU box): every requirement of the package and of
    its extra ``all`` (segmentation and detection) but torch and torchvision with its range, mmcv-lite with mmcv's,
    and no distribution that pulls torch in (the box keeps its image's torch, and ``pip download`` would fetch
    gigabytes of it); what it lists is checked against the metadata of the installed distributions."""
    import importlib.metadata as md

    box = read_requirements('wheelhouse.txt')
    package = {**read_requirements('runtime.txt'), **read_requirements('all.txt')}
    assert {n for n in package if n not in ('torch', 'torchvision')} <= set(box), sorted(package)
    for name, req in package.items():
        if name in box:
            assert box[name].specifier == req.specifier, (name, box[name], req)
    assert box['mmcv-lite'].specifier == read_requirements('mminstall.txt')['mmcv'].specifier
    assert 'torch' not in box and 'torchvision' not in box

    def pulls_torch(name, seen):
        if name in seen:
            return False
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            return False
        deps = [Requirement(r) for r in requires]
        deps = [d.name.lower() for d in deps if d.marker is None or d.marker.evaluate({'extra': ''})]
        return any(d in ('torch', 'torchvision') or pulls_torch(d, seen) for d in deps)

    assert not [n for n in box if pulls_torch(n, set())], box


def test_the_quick_start_installs_the_whole_stack_and_its_stack_hash_covers_every_file_it_reads():
    """tools/setup_env.sh installs classification and the extras `all` (the tests need mmseg and mmdet), and the hash
    that decides whether its environment is current covers every requirements file it installs, those they include
    (``-r``) and mminstall.txt: editing any of them rebuilds the environment."""
    script = (REPO / 'tools' / 'setup_env.sh').read_text()
    installed = set(
        re.findall(
            r'requirements/(\w+\.txt)',
            ' '.join(
                ln for ln in script.splitlines() if re.search(r'install .*-r ', ln) or ln.strip().startswith('cp ')
            ),
        )
    )
    assert {'runtime.txt', 'all.txt', 'tests.txt'} <= installed, installed
    hashed = set(
        re.search(r'HASH=\$\(cat "\$CONSTRAINTS" "\$REPO"/requirements/\{([\w,]+)\}\.txt', script).group(1).split(',')
    )

    def with_includes(name):
        lines = (REPO / 'requirements' / name).read_text().splitlines()
        return {name[:-4]}.union(*[with_includes(ln[2:].strip()) for ln in lines if ln.startswith('-r')])

    needed = set().union(*map(with_includes, installed | {'mminstall.txt'}))
    assert needed <= hashed, sorted(needed - hashed)


def script(name, *args, env=None, cwd=REPO):
    return subprocess.run(
        ['bash', str(Path(cwd) / 'tools' / name), *args], capture_output=True, text=True, timeout=60, env=env, cwd=cwd
    )


def test_setup_env_names_one_environment_per_mmcv_and_refuses_unknown_arguments(tmp_path):
    """``tools/setup_env.sh --print-venv`` prints the environment it sets up and changes nothing: mmcv-lite's by
    default, the compiled ops' with ``--with-ops`` (another one, so that switching never reinstalls); each has
    its variable. An unknown argument stops it (exit 2) naming the ones it takes."""
    home = tmp_path / 'home'
    env = {k: v for k, v in os.environ.items() if k not in ('MMVITREG_VENV', 'MMVITREG_OPS_VENV')}
    env['HOME'] = str(home)
    printed = {
        args: script('setup_env.sh', '--print-venv', *args, env=env).stdout.strip() for args in ((), ('--with-ops',))
    }
    assert printed == {(): f'{home}/.cache/mmvitreg/venv', ('--with-ops',): f'{home}/.cache/mmvitreg/venv-ops'}
    env.update(MMVITREG_VENV=str(tmp_path / 'lite'), MMVITREG_OPS_VENV=str(tmp_path / 'ops'))
    assert script('setup_env.sh', '--with-ops', '--print-venv', env=env).stdout == f'{tmp_path / "ops"}\n'
    assert script('setup_env.sh', '--print-venv', env=env).stdout == f'{tmp_path / "lite"}\n'
    assert not home.exists() and not (tmp_path / 'lite').exists() and not (tmp_path / 'ops').exists()
    bad = script('setup_env.sh', '--with-op', env=env)
    assert bad.returncode == 2 and "unknown argument '--with-op'" in bad.stderr and '--with-ops' in bad.stderr


def test_run_tests_passes_with_ops_to_the_set_up_and_everything_else_to_pytest(tmp_path):
    """``tools/run_tests.sh [--with-ops] [pytest args]``: ``--with-ops``, wherever it stands, selects the set-up and
    the environment that pytest runs in; the other arguments reach pytest in their order (the set-up script and the
    environment's python here record what they were given). The lint (``tools/lint.sh``) runs between the two, so
    a violation stops the run before any test."""
    (tmp_path / 'tools').mkdir()
    shutil.copy(REPO / 'tools' / 'run_tests.sh', tmp_path / 'tools')
    log = tmp_path / 'calls.log'
    (tmp_path / 'tools' / 'lint.sh').write_text(f'echo "lint $*" >> {log}\n')
    (tmp_path / 'tools' / 'setup_env.sh').write_text(
        f'echo "setup $*" >> {log}\n'
        f'case " $* " in *" --print-venv "*) case " $* " in *" --with-ops "*) echo {tmp_path}/ops ;; '
        f'*) echo {tmp_path}/lite ;; esac ;; esac\n'
    )
    for venv in ('lite', 'ops'):
        python = tmp_path / venv / 'bin' / 'python'
        python.parent.mkdir(parents=True)
        python.write_text(f'#!/usr/bin/env bash\necho "{venv} python $*" >> {log}\n')
        python.chmod(0o755)

    def calls(*args):
        log.unlink(missing_ok=True)
        assert script('run_tests.sh', *args, cwd=tmp_path).returncode == 0
        return log.read_text().splitlines()

    assert calls('-x', '-k', 'wheel') == [
        'setup ',
        'setup --print-venv',
        'lint ',
        'lite python -m pytest tests -q -p no:cacheprovider -n 2 --dist loadfile -x -k wheel',
    ]
    assert calls('-x', '--with-ops', 'tests/test_a.py') == [
        'setup --with-ops',
        'setup --print-venv --with-ops',
        'lint ',
        'ops python -m pytest tests -q -p no:cacheprovider -n 2 --dist loadfile -x tests/test_a.py',
    ]
