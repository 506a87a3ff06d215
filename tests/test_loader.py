"""One loader for every checkpoint (issue 31; issue 32 items 4 and 7, the loading part).

The EMA copy is loaded like the model; a checkpoint's own parameters that find no place stop the load, naming the
config that takes them; derived buffers are not counted; remote files go through mmengine's file backends and the
same allow-listed reader; the converters, ``pytorch2onnx.py``, the analysis tools and mmpretrain's ``get_model`` use
the one pass; a model that is not mmvitreg's loads as its library loads it, with or without ``import mmvitreg``."""

import ast
import copy
import json
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import REPO, tool_env
from guard_helpers import TECHNIQUES, build_workspace, tool
from mmengine.config import Config
from mmengine.fileio import LocalBackend, register_backend
from mmengine.registry import DefaultScope
from model_helpers import random_checkpoint
from test_official_checkpoint_loading import LAYOUTS, build, max_diff, runner_load, save

from mmvitreg.engine.checkpoint import CheckpointError, fit, read_checkpoint

DEEPVIT = TECHNIQUES[0]
PREFIX = 'fakeremote'


class PrefixedLocalBackend(LocalBackend):
    """A stand-in for a remote backend: ``fakeremote://<path>`` is the local file ``<path>`` (no network)."""

    @staticmethod
    def _path(filepath):
        return str(filepath)[len(f'{PREFIX}://') :]

    def get(self, filepath):
        return super().get(self._path(filepath))

    def get_local_path(self, filepath):
        return super().get_local_path(self._path(filepath))


register_backend(PREFIX, PrefixedLocalBackend, prefixes=PREFIX, force=True)


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('loader_ws'))


def data_options(ws):
    return [
        '--cfg-options',
        f'test_dataloader.dataset.data_root={ws / "digits"}',
        'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
        'test_dataloader.dataset.indices=16',
    ]


# ---------------------------------------------------------------- item 1: the EMA copy
def test_tools_test_py_loads_the_ema_copy_of_a_module_prefixed_checkpoint(ws, tmp_path):
    """A DDP-style file (``module.`` keys) under an EMAHook recipe: the EMA copy that tools/test.py evaluates gets
    the same weights as from the unprefixed file (mmengine's hook alone kept the copy at its initialisation)."""
    config = tmp_path / 'deepvit_ema.py'
    config.write_text(f"_base_ = '{DEEPVIT}'\ncustom_hooks = [dict(type='EMAHook', momentum=1e-4)]\n")
    plain = random_checkpoint(Config.fromfile(str(config)), tmp_path / 'plain.pth')
    state = torch.load(plain, weights_only=False)
    torch.save({'state_dict': {'module.' + k: v for k, v in state['state_dict'].items()}}, tmp_path / 'ddp.pth')
    scores = {}
    for name in ('plain', 'ddp'):
        out = tmp_path / f'{name}.pkl'
        tool('test')(
            [
                str(config),
                str(tmp_path / f'{name}.pth'),
                '--work-dir',
                str(tmp_path / name),
                '--out',
                str(out),
                *data_options(ws),
            ]
        )
        with open(out, 'rb') as f:
            scores[name] = torch.stack([torch.as_tensor(p['pred_score']) for p in pickle.load(f)])
    assert torch.equal(scores['plain'], scores['ddp'])
    log = next((tmp_path / 'ddp').rglob('*.log')).read_text()
    assert 'Start testing on EMA model' in log  # the hook's own line (the config dump names EMAHook anyway)


def test_an_ema_copy_that_does_not_fit_stops_the_run(tmp_path):
    """The copy is checked by the model's policy: its own mismatch (here a copy of another width) stops the load."""
    from mmengine.hooks import EMAHook

    _, _, cfg = LAYOUTS['deit']
    ckpt = save(tmp_path / 'deit.pth', 'deit')
    runner = runner_load(tmp_path, cfg, ckpt)  # loads, no EMA hook
    hook = EMAHook()
    other = copy.deepcopy(cfg)
    other['head']['num_classes'] = 7
    hook.ema_model = torch.nn.Module()
    hook.ema_model.module = build(other)
    runner._hooks.append(hook)
    with pytest.raises(CheckpointError, match="does not fit EMAHook's EMA copy of ImageClassifier"):
        runner.load_checkpoint(str(ckpt), strict=True)


# ---------------------------------------------------------------- item 2: unexpected layers, counts
def talking_heads_release(path):
    """The official DiversePatch release (talking heads: proj_pre / proj_post in every block)."""
    from test_diversepatch_converter import official_state_dict

    torch.save({'model': official_state_dict(), 'epoch': 400}, path)
    return path


def test_a_talking_heads_release_in_a_model_without_them_stops_naming_the_config_that_takes_them(tmp_path):
    """load_from (the backbone policy): every backbone tensor would fill, but proj_pre / proj_post would be dropped
    (the model would not compute what was trained): an error naming them and the talking-heads config;
    --allow-partial (policy partial) loads the rest."""
    _, _, cfg = LAYOUTS['diversepatch']
    plain = copy.deepcopy(cfg)
    plain['backbone']['arch'] = dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=64)
    ckpt = talking_heads_release(tmp_path / 'talking_heads.pth')
    with pytest.raises(CheckpointError) as e:
        runner_load(tmp_path, plain, ckpt)
    message = str(e.value)
    assert 'has 4 parameters the model TokenClassifier has no place for (' in message
    assert 'backbone.layers.0.attn.proj_pre.weight' in message
    assert "attn_types='talking_heads'" in message and 'deit-base12-talking-heads' in message
    assert '--allow-partial' in message
    runner = runner_load(tmp_path, plain, ckpt, load_from='partial')
    assert max_diff(runner.model, 'diversepatch') > 1e-3  # loaded, without talking heads
    assert max_diff(runner_load(tmp_path, cfg, ckpt).model, 'diversepatch') < 1e-6  # the config that takes them


def test_counts_leave_out_derived_buffers():
    """A one-key checkpoint on ResNet-18 is '1 matched' (BatchNorm adds its num_batches_tracked to the state
    dict it is given; they used to count), and a file with a stale num_batches_tracked / relative_position_index
    is not 'unexpected'."""
    from mmpretrain.models import ResNet

    model = ResNet(depth=18)
    report = fit(model, {'conv1.weight': model.conv1.weight.detach().clone()})
    assert report.summary().startswith('1 matched, ')
    assert not any('num_batches_tracked' in k for k in report.missing)
    state = {
        **model.state_dict(),
        'extra.num_batches_tracked': torch.tensor(3),
        'layer9.relative_position_index': torch.zeros(4, dtype=torch.long),
    }
    report = fit(ResNet(depth=18), state)
    assert report.clean and len(report.matched) == len([k for k in model.state_dict() if 'num_batches' not in k])


# ---------------------------------------------------------------- item 3: one loader everywhere
def test_a_remote_checkpoint_is_fetched_by_the_file_backend_and_read_by_the_allow_listed_reader(tmp_path):
    """``fakeremote://`` (a registered backend, as https:// or s3://): load_from converts the release; a pickle
    that would run code is refused with the same message as a local one; an unknown scheme is one line."""
    from test_safe_loading import _RunsCode

    _, _, cfg = LAYOUTS['lvvit']
    ckpt = save(tmp_path / 'lvvit.pth', 'lvvit')
    assert max_diff(runner_load(tmp_path, cfg, f'{PREFIX}://{ckpt}').model, 'lvvit') < 1e-6
    marker = tmp_path / 'ran'
    torch.save(
        {'state_dict': {'w': torch.zeros(1)}, 'meta': {'x': _RunsCode(f'open({str(marker)!r}, "w")')}},
        tmp_path / 'unsafe.pth',
    )
    with pytest.raises(CheckpointError, match="is not on mmvitreg's allow-list") as e:
        read_checkpoint(f'{PREFIX}://{tmp_path / "unsafe.pth"}')
    assert str(e.value).startswith(f'checkpoint {PREFIX}://{tmp_path}') and not marker.exists()
    with pytest.raises(CheckpointError, match="cannot be fetched through mmengine's file backends"):
        read_checkpoint('nobackend://host/model.pth')


def test_the_converters_refuse_in_one_error_line(tmp_path):
    from checkpoint_converter import converter_cli
    from test_safe_loading import _RunsCode

    from mmvitreg.models.backbones.deepvit import convert_deepvit

    torch.save({'model': {'w': torch.zeros(1)}, 'args': _RunsCode('1')}, tmp_path / 'unsafe.pth')
    (tmp_path / 'truncated.pth').write_bytes(save(tmp_path / 'ok.pth', 'deit').read_bytes()[:300])
    for src in ('unsafe.pth', 'truncated.pth'):
        with pytest.raises(SystemExit) as e:
            converter_cli(convert_deepvit, 'DeepViT', argv=[str(tmp_path / src), str(tmp_path / 'dst.pth')])
        assert str(e.value.code).startswith(f'error: checkpoint {tmp_path / src}') and '\n' not in str(e.value.code)
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / 'tools' / 'model_converters' / 'deepvit_to_mmvitreg.py'),
            str(tmp_path / 'unsafe.pth'),
            str(tmp_path / 'dst.pth'),
        ],
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=300,
    )
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 1 and 'Traceback' not in run.stderr, run.stderr
    assert last.startswith(f'error: checkpoint {tmp_path / "unsafe.pth"}') and not (tmp_path / 'dst.pth').exists()


def test_pytorch2onnx_and_the_analysis_tools_load_an_official_release(tmp_path):
    """The issue's example: the export's strict load of an official raw file (the analysis tools' build_model)
    converts it as tools/test.py does, instead of stopping on mmengine's key mismatch."""
    from mmvitreg.utils import build_model

    _, _, model_cfg = LAYOUTS['lvvit']
    cfg = Config(dict(model=model_cfg, default_scope='mmpretrain'))
    ckpt = save(tmp_path / 'lvvit_raw.pth', 'lvvit')
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = build_model(cfg, str(ckpt), 'cpu')
        assert max_diff(model, 'lvvit') < 1e-6
        with pytest.raises(CheckpointError, match='does not fit the model'):
            build_model(cfg, str(save(tmp_path / 'deit.pth', 'deit')), 'cpu')


def test_get_model_converts_an_official_release_for_mmvitreg_models(tmp_path):
    """mmpretrain's get_model (mmengine's load_checkpoint) on an mmvitreg model: the release is converted and
    fitted by the one pass, strictly (inference): another release is one line naming the opt-out."""
    from mmpretrain import get_model

    _, _, model_cfg = LAYOUTS['deepvit']
    cfg = Config(dict(model=model_cfg, default_scope='mmpretrain'))
    model = get_model(cfg, pretrained=str(save(tmp_path / 'deepvit.pth', 'deepvit')), device='cpu')
    assert max_diff(model, 'deepvit') < 1e-6
    with pytest.raises(CheckpointError, match='does not fit the model ImageClassifier .*partial_loading'):
        get_model(cfg, pretrained=str(save(tmp_path / 'lvvit.pth', 'lvvit')), device='cpu')


RESNET_SCRIPT = textwrap.dedent('''
    import json, logging, sys, warnings
    import torch
    if sys.argv[1] == 'with':
        import mmvitreg  # noqa
    from mmengine.logging import MMLogger
    from mmengine.runner import load_checkpoint
    from mmpretrain.models import ResNet
    records = []
    logger = MMLogger.get_instance('mmengine')
    logger.addHandler(type('H', (logging.Handler, ), {'emit': lambda self, r: records.append(r.getMessage())})())
    outcome = {}
    for how in ('init_cfg', 'load_checkpoint'):
        torch.manual_seed(0)
        cfg = dict(type='Pretrained', checkpoint=sys.argv[2]) if how == 'init_cfg' else None
        model = ResNet(depth=18, init_cfg=cfg)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            try:
                model.init_weights() if how == 'init_cfg' else load_checkpoint(model, sys.argv[2])
                result = 'ok'
            except Exception as e:
                result = f'{type(e).__name__}: {e}'
        outcome[how] = dict(result=result, warnings=sorted(str(w.message) for w in caught),
                            weights=float(sum(p.double().sum() for p in model.state_dict().values())))
    outcome['log'] = [r for r in records if 'Pretrained' in r or 'checkpoint' in r or 'key' in r]
    print(json.dumps(outcome))
''')


def test_a_plain_mmpretrain_resnet_loads_the_same_with_and_without_import_mmvitreg(tmp_path):
    """Issue 32 item 4: a checkpoint that does not fit a ResNet-18 (one key of another shape, one unknown key):
    mmengine's own non-strict load and messages, whether or not mmvitreg was imported; mmvitreg's models still
    convert official files through init_cfg (test_official_checkpoint_loading.py)."""
    ckpt = tmp_path / 'not_fitting.pth'
    torch.save({'state_dict': {'conv1.weight': torch.ones(8, 3, 3, 3), 'fc9.weight': torch.ones(2)}}, ckpt)
    script = tmp_path / 'resnet.py'
    script.write_text(RESNET_SCRIPT)
    runs = {}
    for how in ('without', 'with'):
        run = subprocess.run(
            [sys.executable, str(script), how, str(ckpt)],
            capture_output=True,
            text=True,
            env=tool_env(),
            timeout=300,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        runs[how] = json.loads(run.stdout.strip().splitlines()[-1])
    assert runs['with'] == runs['without']
    assert runs['with']['init_cfg']['result'] == 'ok' and runs['with']['load_checkpoint']['result'] == 'ok'


def test_the_loading_patch_is_gated_and_listed():
    import mmvitreg.compat as compat

    assert 'mmvitreg_model_loading' in compat.applied()
    from mmengine.registry import WEIGHT_INITIALIZERS

    from mmvitreg.engine.checkpoint import Pretrained

    assert WEIGHT_INITIALIZERS.get('mmvitreg.Pretrained') is Pretrained


def test_init_cfg_mmvitreg_pretrained_converts_on_any_model_that_asks(tmp_path):
    """``type='Pretrained', _scope_='mmvitreg'``: mmpretrain's own ViT (not an mmvitreg model) gets the conversion
    because its config asks for it (and, the type being 'Pretrained', mmpretrain keeps the loaded position
    embedding)."""
    _, _, cfg = LAYOUTS['deit']
    ckpt = save(tmp_path / 'deit.pth', 'deit')
    asked = copy.deepcopy(cfg)
    asked['init_cfg'] = dict(type='Pretrained', _scope_='mmvitreg', checkpoint=str(ckpt))
    model = build(asked)
    model.init_weights()
    assert max_diff(model, 'deit') < 1e-6


def test_no_import_circle_between_the_converters_and_the_backbones():
    """models/converters.py imports no backbone and nothing of the package but the bottom, mmvitreg.fileio (its
    error class); the backbones register their layouts; fileio holds the read, converters.py the detect and convert,
    engine/checkpoint.py the fit and the judgement."""
    tree = ast.parse((REPO / 'mmvitreg' / 'models' / 'converters.py').read_text())
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [n])
    ]
    assert not [
        m
        for m in imported
        if m and m != 'mmvitreg.fileio' and ('mmvitreg' in m or 'backbones' in m or m.startswith('.'))
    ], imported
    from mmvitreg.models.converters import LAYOUTS

    names = [layout.name.split(' (')[0] for layout in LAYOUTS]
    assert set(names) == {
        'official DeepViT',
        'official LV-ViT',
        'official DiversePatch',
        'timm / DeiT ViT',
        'official Swin Transformer',
    }
    assert names.index('timm / DeiT ViT') > max(
        names.index(n) for n in names if n.startswith('official') and 'Swin' not in n
    )


# ---------------------------------------------------------------- item 4: tools and docs
def test_trace_support_checks_a_config_on_its_own_backbone(tmp_path):
    """--config of a 4-block DeepViT with TL-Align and DRLoc (a config that trains): the first column is the
    config's backbone (4 blocks, 96 channels), where every user fits; DeepViT-S, asked for beside it, reads
    '16 blocks, not 4' (what the tool used to say for the config itself)."""
    from model_helpers import composed_config
    from studies.trace_support import format_table, support_table

    config = str(composed_config(tmp_path))
    table = support_table(config=config)
    assert list(table) == ['DeepViT (config)'] and len(table['DeepViT (config)']) == 4
    assert set(table['DeepViT (config)'].values()) == {'✓'}
    assert "DeepViT (config): the config's model.backbone as configured, 4 blocks" in format_table(table, 'cls', config)
    preset = support_table(config=config, backbones=['DeepViT'])['DeepViT']
    assert preset['target_transform: TLAlign(num_layers=4)'] == '16 blocks, not 4'


def test_the_docs_own_config_sets_every_class_count_and_data_root_and_trains_on_digits(ws, tmp_path):
    """docs/configs.md's "Your own config" example, as written: every num_classes of the built config is its
    num_classes and every data root its data_root; trained for one epoch on the digits (data paths pointed at
    the workspace, four images, the model as the example builds it)."""
    doc = (REPO / 'docs' / 'configs.md').read_text()
    block = '#' + doc.split('```python\n# my_project/lvvit-s_in100.py')[1].split('```')[0]
    config = tmp_path / 'lvvit-s_in100.py'
    config.write_text(block)
    from mmvitreg.utils import load_config

    cfg = load_config(str(config))
    found = {}

    def walk(node, path=''):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ('num_classes', 'data_root', 'label_root'):
                    found[f'{path}.{k}'] = v
                walk(v, f'{path}.{k}')
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f'{path}.{i}')

    walk(cfg.to_dict())
    wrong = {k: v for k, v in found.items() if v not in (100, 'data/imagenet100', 'data/imagenet100/label_maps_packed')}
    assert not wrong, wrong
    assert (
        len([k for k in found if k.endswith('num_classes')]) >= 4
        and len([k for k in found if k.endswith('data_root')]) >= 3
    )
    from guard_helpers import train

    train(
        config,
        ws,
        tmp_path / 'work',
        **{
            'train_cfg.max_epochs': 1,
            'train_dataloader.batch_size': 4,
            'train_dataloader.dataset.indices': 4,
            'val_dataloader.batch_size': 4,
            'val_dataloader.dataset.indices': 4,
            'test_dataloader.dataset.indices': 4,
        },
    )
    assert (tmp_path / 'work' / 'epoch_1.pth').is_file()
