"""Issue 38 item 3, issue 44 item 2: no global patch. A model without an mmvitreg module loads exactly as without
mmvitreg, whatever the import order (``mmengine.infer`` imported before or after ``import mmvitreg``), from a local
file and from a URL (mmengine's own ``load_from_http``, from torch.hub's download cache: nothing is downloaded), and
mmengine's ``CheckpointLoader`` keeps its own loader of every scheme; mmvitreg's own models keep their loading
(official releases converted, strict inference) in either order. Each order runs in a fresh interpreter, because
the order is what is under test."""

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import tool_env

ORDERS = ('without', 'infer-first', 'mmvitreg-first')

SCRIPT = textwrap.dedent('''
    import json, logging, sys, warnings
    import torch
    import torch.hub
    order, ckpt = sys.argv[1:]
    URL = 'https://download.invalid/not_fitting.pth'  # in torch.hub's cache (TORCH_HOME): mmengine reads it there


    def no_download(url, *args, **kwargs):
        raise RuntimeError(f'tried to download {url}')


    torch.hub.download_url_to_file = no_download
    if order == 'infer-first':
        import mmengine.infer  # noqa: F401  (mmengine.infer.infer imports _load_checkpoint_to_model by name)
    if order != 'without':
        import mmvitreg  # noqa: F401
    import mmengine.infer.infer as infer
    from mmengine.logging import MMLogger
    from mmengine.model.weight_init import PretrainedInit
    from mmengine.runner import load_checkpoint
    from mmengine.runner.checkpoint import CheckpointLoader
    from mmpretrain.models import ResNet, VisionTransformer
    records = []
    logger = MMLogger.get_instance('mmengine')
    logger.addHandler(type('H', (logging.Handler, ), {'emit': lambda self, r: records.append(r.getMessage())})())
    ARCH = dict(embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=64)
    BUILD = {'resnet': lambda init_cfg: ResNet(depth=18, init_cfg=init_cfg),
             'vit': lambda init_cfg: VisionTransformer(arch=ARCH, img_size=32, patch_size=16, init_cfg=init_cfg)}
    LOAD = {'init_cfg': lambda model: model.init_weights(),
            'load_checkpoint': lambda model: load_checkpoint(model, ckpt),  # mmpretrain's get_model path
            'inferencer': lambda model: infer._load_checkpoint_to_model(model, torch.load(ckpt)),  # BaseInferencer
            'url': lambda model: load_checkpoint(model, URL)}
    outcome = {'PretrainedInit.__call__': PretrainedInit.__call__.__module__,
               'loaders': {scheme: f'{f.__module__}.{f.__qualname__}'
                           for scheme, f in CheckpointLoader._schemes.items()}}
    for name, build in BUILD.items():
        for how, load in LOAD.items():
            torch.manual_seed(0)
            model = build(dict(type='Pretrained', checkpoint=ckpt) if how == 'init_cfg' else None)
            del records[:]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter('always')
                try:
                    load(model)
                    result = 'ok'
                except Exception as e:
                    result = f'{type(e).__name__}: {e}'
            outcome[f'{name} {how}'] = dict(
                result=result, warnings=sorted(str(w.message) for w in caught), log=list(records),
                state={k: float(v.double().sum()) for k, v in model.state_dict().items()})
    if order != 'without':  # mmvitreg's own ViT: strict inference through both private copies, in either order
        from mmvitreg.models.backbones import VisionTransformer as Ours
        for how in ('load_checkpoint', 'inferencer'):
            try:
                LOAD[how](Ours(arch=ARCH, img_size=32, patch_size=16))
                outcome[f'mmvitreg {how}'] = 'loaded'
            except Exception as e:
                outcome[f'mmvitreg {how}'] = type(e).__name__
    print(json.dumps(outcome))
''')


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """Each import order's outcome, for a checkpoint that fits neither model (one key of another shape, one that
    fits the ViT, one unknown key)."""
    tmp = tmp_path_factory.mktemp('no_global_patch')
    ckpt = tmp / 'not_fitting.pth'
    torch.save(
        {
            'state_dict': {
                'conv1.weight': torch.ones(8, 3, 3, 3),
                'cls_token': torch.ones(1, 1, 32),
                'fc9.weight': torch.ones(2),
            }
        },
        ckpt,
    )
    cache = tmp / 'torch_home' / 'hub' / 'checkpoints'  # torch.hub's download cache, which mmengine's loader reads
    cache.mkdir(parents=True)
    shutil.copy(ckpt, cache / ckpt.name)
    script = tmp / 'load.py'
    script.write_text(SCRIPT)
    out = {}
    for order in ORDERS:
        run = subprocess.run(
            [sys.executable, str(script), order, str(ckpt)],
            capture_output=True,
            text=True,
            env={**tool_env(), 'TORCH_HOME': str(tmp / 'torch_home')},
            timeout=300,
            cwd=tmp,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        out[order] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize('order', ORDERS[1:])
def test_plain_mmpretrain_models_load_as_without_mmvitreg_in_any_import_order(runs, order):
    """A ResNet-18 and a ViT of mmpretrain's, through ``init_cfg`` Pretrained, ``load_checkpoint`` (of a file and of
    a URL) and ``BaseInferencer``'s loader: the same result, warnings, log lines and weights as without mmvitreg;
    mmengine's ``PretrainedInit`` and the loaders of its ``CheckpointLoader`` are its own (a URL goes to
    ``load_from_http``, which reads torch.hub's cache and downloads nothing)."""
    mine = {k: v for k, v in runs[order].items() if not k.startswith('mmvitreg ')}
    assert mine == runs['without']
    assert runs[order]['PretrainedInit.__call__'] == 'mmengine.model.weight_init'
    assert {runs[order]['loaders'][scheme] for scheme in ('', 'http://', 'https://', r'(\S+\:)?s3://')} == {
        'mmengine.runner.checkpoint.load_from_local',
        'mmengine.runner.checkpoint.load_from_http',
        'mmengine.runner.checkpoint.load_from_ceph',
    }
    assert runs[order]['vit url'] == runs[order]['vit load_checkpoint']  # the URL read from mmengine's cache
    vit = runs[order]['vit load_checkpoint']
    assert vit['result'] == 'ok' and vit['state']['cls_token'] == 32.0  # the fitting key did load, non-strictly


@pytest.mark.parametrize('order', ORDERS[1:])
def test_mmvitreg_models_load_strictly_in_any_import_order(runs, order):
    """mmvitreg's own ViT: the same checkpoint leaves parameters unfilled, so mmengine's ``load_checkpoint`` and
    ``BaseInferencer``'s loader refuse it (strict inference) whether ``mmengine.infer`` came first or second."""
    assert runs[order]['mmvitreg load_checkpoint'] == runs[order]['mmvitreg inferencer'] == 'CheckpointError'
