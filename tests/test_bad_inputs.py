"""The bad-input catalogue (issue 14, parts 5-6): every case of tools/misc/troubleshooting.py, run through
the real tools (in this process), stops with its message, and afterwards every file that existed is
unchanged and no checkpoint was written. docs/troubleshooting.md is generated from the same catalogue.

Cases that depend on the model run for every config in guard_helpers.TECHNIQUES (a checkpoint of
another technique, a NaN loss), so a new technique is covered by adding its config there."""

import itertools
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import REPO, TOOLS, tool_env
from crafted_maps import craft_map
from guard_helpers import TECHNIQUES, build_workspace, files_of, tool, train
from mmengine.config import Config
from mmengine.registry import DefaultScope
from torch import nn
from troubleshooting import CASES, render_markdown

DEEPVIT, LVVIT_TL, SWIN_MIX = TECHNIQUES[:3]  # the first three; later techniques join the generic cases
DIVERSEPATCH = TECHNIQUES[5]
SCENARIOS = {}
_work_dirs = itertools.count()


def scenario(case_id):
    def register(fn):
        SCENARIOS[case_id] = fn
        return fn

    return register


@pytest.fixture(scope='module')
def ctx(tmp_path_factory):
    """A workspace, one short training run per technique (its checkpoint), and copies of the data to break."""
    ws = build_workspace(tmp_path_factory.mktemp('bad_ws'))
    runs = {}
    for config in TECHNIQUES:
        runs[config] = ws / f'run_{config.stem}'
        train(
            config,
            ws,
            runs[config],
            '--no-validate',
            **{'train_cfg.max_epochs': 1, 'train_dataloader.batch_size': 8, 'train_dataloader.dataset.indices': 8},
        )
    return SimpleNamespace(ws=ws, runs=runs, ckpt={c: r / 'epoch_1.pth' for c, r in runs.items()})


def stop_message(fn) -> str:
    """Run ``fn``; it must stop (a non-zero exit or an exception). Returns what the user reads."""
    try:
        fn()
    except SystemExit as e:
        assert e.code not in (0, None), 'exited 0'
        return str(e.code)
    except Exception as e:  # errors raised while building the model or in the first step
        return f'{type(e).__name__}: {e}'
    raise AssertionError('the run did not stop')


def stops(fn, check=None):
    """The scenario's run: ``fn`` must stop; ``check(message)`` asserts more about the message."""

    def run():
        message = stop_message(fn)
        if check is not None:
            check(message)
        return message

    return run


def run_train(ctx, config, *flags, work=None, **options):
    work = work or ctx.ws / f'scenario_{next(_work_dirs)}'
    return lambda: train(
        config,
        ctx.ws,
        work,
        *flags,
        **{
            'train_cfg.max_epochs': 1,
            'train_dataloader.batch_size': 4,
            'train_dataloader.dataset.indices': 4,
            **options,
        },
    )


def run_test(ctx, config, checkpoint, *flags):
    data = [
        f'test_dataloader.dataset.data_root={ctx.ws / "digits"}',
        'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
        'test_dataloader.dataset.indices=8',
    ]
    work = ctx.ws / f'scenario_{next(_work_dirs)}'
    return lambda: tool('test')([str(config), str(checkpoint), '--work-dir', str(work), *flags, '--cfg-options', *data])


def derived(ctx, name, base, body):
    path = ctx.ws / f'{name}.py'
    path.write_text(f"_base_ = '{base}'\n" + textwrap.dedent(body))
    return path


def broken_copy(ctx, name, what='digits'):
    dst = ctx.ws / name
    if not dst.exists():
        shutil.copytree(ctx.ws / what, dst)
    return dst


def first_train_image(data):
    return data / 'train' / (data / 'meta' / 'train.txt').read_text().split()[0]


# ---------------------------------------------------------------- install
def run_without(ctx, name, hidden, cmd, distributions=()):
    """``python cmd`` in a process of its own (in ``ctx.ws``) that sees neither the modules ``hidden`` nor the
    ``distributions``, as in an environment without them (tests/test_env_imports.py); it must stop: its stderr."""
    from test_env_imports import hiding

    env = tool_env()
    env['PYTHONPATH'] = os.pathsep.join(
        [str(hiding(ctx.ws.parent / name, *hidden, distributions=distributions)), env['PYTHONPATH']]
    )

    def run():
        proc = subprocess.run(
            [sys.executable, *map(str, cmd)], cwd=ctx.ws, env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode != 0, proc.stdout[-3000:]
        return proc.stderr

    return run


@scenario('extra-missing')
def _(ctx):
    from test_env_imports import SEG_DEMO

    return run_without(
        ctx,
        'without_mmseg',
        ['mmseg'],
        [TOOLS / 'train.py', SEG_DEMO, '--work-dir', ctx.ws / 'seg'],
        distributions=['mmsegmentation'],
    )


@scenario('pkg-resources-missing')
def _(ctx):
    import mmpretrain
    from test_env_imports import DEMO

    train = Path(mmpretrain.__file__).parent / '.mim' / 'tools' / 'train.py'  # mmpretrain's own, as pip installs it
    return run_without(ctx, 'without_pkg_resources', ['pkg_resources'], [train, DEMO, '--work-dir', ctx.ws / 'own'])


@scenario('op-not-served')
def _(ctx):
    return run_without(
        ctx,
        'without_ext',
        ['mmcv._ext'],
        [
            '-c',
            (
                "import mmvitreg, torch; from mmcv.ops import RoIAlign; "
                "RoIAlign(2, 1.0, 2, pool_mode='max')(torch.zeros(1, 1, 4, 4), torch.tensor([[0., 0., 0., 3., 3.]]))"
            ),
        ],
    )


@scenario('mmcv-ext-missing')
def _(ctx):
    # mmvitreg on PYTHONPATH (no .pth runs): mmseg's models imported first, as mmseg's own tools/train.py does
    return run_without(ctx, 'without_ext_no_hook', ['mmcv._ext'], ['-c', 'import mmseg.models'])


@scenario('host-imported-first')
def _(ctx):
    return run_without(
        ctx, 'without_ext_host_first', ['mmcv._ext'], ['-c', 'import mmpretrain.models, mmvitreg, mmdet.models']
    )


# ---------------------------------------------------------------- config and tools
@scenario('config-missing')
def _(ctx):
    return stops(lambda: tool('train')([str(ctx.ws / 'configs' / 'deepvit-tny.py')]))


@scenario('config-scope')
def _(ctx):
    path = ctx.ws / 'no_runtime.py'
    path.write_text("model = dict(type='ImageClassifier')\n")
    return stops(lambda: tool('train')([str(path)]))


@scenario('component-misspelled')
def _(ctx):
    cfg = derived(ctx, 'typo', DEEPVIT, "model = dict(backbone=dict(_delete_=True, type='mmvitreg.DeepVit'))\n")
    return stops(run_train(ctx, cfg))


@scenario('arch-unknown')
def _(ctx):
    return stops(run_train(ctx, DEEPVIT, **{'model.backbone.arch': 'xs'}))


@scenario('option-invalid')
def _(ctx):
    return stops(run_train(ctx, DEEPVIT, **{'model.backbone.out_type': 'patch'}))


@scenario('amp-float16-cpu')
def _(ctx):
    assert not torch.cuda.is_available(), 'this scenario is the CPU case'
    return stops(run_train(ctx, DEEPVIT, '--amp', '--amp-dtype', 'float16'))


# ---------------------------------------------------------------- data
@scenario('data-root-missing')
def _(ctx):
    return stops(run_train(ctx, DEEPVIT, **{'train_dataloader.dataset.data_root': ctx.ws / 'no_such_data'}))


@scenario('data-root-empty')
def _(ctx):
    data = broken_copy(ctx, 'empty_digits')
    (data / 'meta' / 'train.txt').write_text('')
    return stops(run_train(ctx, DEEPVIT, **{'train_dataloader.dataset.data_root': data}))


@scenario('image-corrupt')
def _(ctx):
    data = broken_copy(ctx, 'corrupt_digits')
    image = first_train_image(data)
    image.write_bytes(b'\xff\xd8 not really a JPEG')
    return stops(
        run_train(
            ctx,
            DEEPVIT,
            **{
                'train_dataloader.dataset.data_root': data,
                'train_dataloader.dataset.indices': 1,
                'train_dataloader.batch_size': 1,
            },
        ),
        check=lambda message: _names(message, image),
    )


def _names(message, path):
    assert str(path) in message, f'the message does not name {path}: {message}'


@scenario('label-maps-not-configured')
def _(ctx):
    cfg = derived(
        ctx,
        'tl_no_maps',
        LVVIT_TL,
        """
        train_dataloader = dict(dataset=dict(pipeline=[dict(type='LoadImageFromFile'), dict(type='PackInputs')]))
    """,
    )
    return stops(run_train(ctx, cfg))


@scenario('label-map-missing')
def _(ctx):
    (ctx.ws / 'no_maps').mkdir(exist_ok=True)
    return stops(run_train(ctx, LVVIT_TL, **{'train_dataloader.dataset.pipeline.1.label_root': ctx.ws / 'no_maps'}))


def broken_maps(ctx, name, label_map, **options):
    """A copy of the maps whose first training image's map is ``label_map`` (saved), or what ``label_map(path)``
    writes; the run trains on that image."""
    maps = broken_copy(ctx, name, 'label_maps')
    data = ctx.ws / 'digits'
    image = first_train_image(data)
    target = maps / image.relative_to(data / 'train').with_suffix('.pt')
    target.with_suffix('.npy').unlink(missing_ok=True)  # the generator's map of that image, else read before the .pt
    label_map(target) if callable(label_map) else torch.save(label_map, target)
    return run_train(
        ctx,
        LVVIT_TL,
        **{
            'train_dataloader.dataset.pipeline.1.label_root': maps,
            'train_dataloader.dataset.indices': 1,
            'train_dataloader.batch_size': 1,
            **options,
        },
    ), target


def one_line_naming(path):
    def check(message):
        _names(message, path)
        assert '\n' not in message.strip(), message

    return check


@scenario('label-map-bounds')
def _(ctx):
    run, target = broken_maps(
        ctx,
        'maps_bounds',
        lambda path: craft_map(path, (2, 5, 4, 4), (1 << 40, 16, 4, 1), numel=160),
        **{'train_dataloader.num_workers': 1},
    )
    return stops(run, check=one_line_naming(target))


@scenario('label-map-compressed')
def _(ctx):
    run, target = broken_maps(
        ctx,
        'maps_compressed',
        lambda path: craft_map(path, (2, 5, 4, 4), (80, 16, 4, 1), compress=zipfile.ZIP_DEFLATED),
    )
    return stops(run, check=one_line_naming(target))


@scenario('label-map-store-classes')
def _(ctx):
    from mmvitreg.datasets.label_map_store import pack_label_maps

    store = ctx.ws / 'store_classes'
    if not store.exists():
        pack_label_maps(str(ctx.ws / 'label_maps'), str(store), progress=False)
        maps = np.load(store / 'maps.npy', mmap_mode='r+')
        maps[:, 1, 0] = 12  # each map's top class, after packing: packed.json still says max_class 9
        maps.flush()
        del maps
    return stops(
        run_train(ctx, LVVIT_TL, **{'train_dataloader.dataset.pipeline.1.label_root': store}),
        check=one_line_naming(store),
    )


@scenario('label-map-shape')
def _(ctx):
    run, target = broken_maps(ctx, 'maps_shape', torch.zeros(5, 4, 4, dtype=torch.float16))
    return stops(run, check=lambda message: _names(message, target))


@scenario('label-map-classes')
def _(ctx):
    indices = torch.tensor([12.0, 1.0, 2.0, 3.0, 4.0]).view(5, 1, 1).expand(5, 4, 4)
    run, target = broken_maps(ctx, 'maps_classes', torch.stack([torch.ones(5, 4, 4), indices]).half())
    return stops(run, check=lambda message: _names(message, target))


@scenario('label-map-grid')
def _(ctx):
    return stops(run_train(ctx, LVVIT_TL, **{'train_dataloader.dataset.pipeline.3.token_label_size': 4}))


@scenario('mixtoken-patch-size')
def _(ctx):
    return stops(run_train(ctx, SWIN_MIX, **{'model.train_cfg.mix.patch_size': 8}))


# ---------------------------------------------------------------- model composition
@scenario('mixtoken-backbone')
def _(ctx):
    cfg = derived(
        ctx,
        'mixtoken_resnet',
        SWIN_MIX,
        """
        model = dict(backbone=dict(_delete_=True, type='ResNet', depth=18), head=dict(in_channels=512))
    """,
    )
    return stops(run_train(ctx, cfg))


@scenario('trace-user-backbone')
def _(ctx):
    cfg = derived(
        ctx,
        'tl_swin',
        LVVIT_TL,
        """
        model = dict(backbone=dict(_delete_=True, type='mmvitreg.SwinTransformer', arch=dict(
            embed_dims=32, depths=[2, 2], num_heads=[2, 4]), img_size=32, window_size=4, out_indices=(1, )),
            head=dict(in_channels=64))
    """,
    )
    return stops(run_train(ctx, cfg))


class TapUser(nn.Module):
    """A trace user that reads the tokens of block 12 (the tiny DeepViT has 4)."""

    def __init__(self):
        super().__init__()
        from mmvitreg.models.trace import TraceRequest

        self.trace_request = TraceRequest(token_layers=(12,))

    def loss(self, feats, data_samples, trace):
        return {}


def build_classifier(**kwargs):
    from mmpretrain.registry import MODELS

    kwargs.setdefault(
        'backbone',
        dict(
            type='mmvitreg.DeepViT',
            arch=dict(embed_dims=96, num_layers=4, num_heads=3, feedforward_channels=288, attn_types='reattn'),
            img_size=32,
            patch_size=4,
        ),
    )
    kwargs.setdefault('head', dict(type='VisionTransformerClsHead', num_classes=10, in_channels=96))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(dict(type='mmvitreg.TokenClassifier', **kwargs))


@scenario('tap-missing-block')
def _(ctx):
    return stops(lambda: build_classifier(aux_losses=[TapUser()]))


@scenario('tap-untraced-block')
def _(ctx):
    cvt = dict(
        type='mmvitreg.CvT',
        arch=dict(embed_dims=(8, 16), depths=(1, 2), num_heads=(1, 2)),
        embed_kernels=(3, 3),
        embed_strides=(2, 2),
        embed_paddings=(1, 1),
    )
    return stops(
        lambda: build_classifier(
            backbone=cvt,
            aux_losses=[dict(type='mmvitreg.DRLoc', in_channels=8, layers=(0,))],
            head=dict(type='LinearClsHead', num_classes=10, in_channels=16),
        )
    )


@scenario('head-out-type')
def _(ctx):
    return stops(lambda: build_classifier(head=dict(type='mmvitreg.TokenLabelHead', num_classes=10, in_channels=96)))


@scenario('image-target-dense')
def _(ctx):
    from mmseg.registry import MODELS as SEG_MODELS

    cfg = Config.fromfile(str(REPO / 'configs' / 'demo' / 'upernet_swin-nano_1xb8-300_digits-ade20k-128x128.py'))
    model = dict(cfg.model, type='mmvitreg.TokenSegmentor', aux_losses=[dict(type='mmvitreg.TLAlign')])

    def build():
        with DefaultScope.overwrite_default_scope('mmseg'):
            SEG_MODELS.build(model)

    return stops(build)


@scenario('drloc-in-channels')
def _(ctx):
    return stops(lambda: build_classifier(aux_losses=[dict(type='mmvitreg.DRLoc', in_channels=64, layers=(-1,))]))


@scenario('two-target-transforms')
def _(ctx):
    return stops(lambda: build_classifier(target_transform=[dict(type='mmvitreg.A'), dict(type='mmvitreg.B')]))


# ---------------------------------------------------------------- checkpoints
@scenario('checkpoint-missing')
def _(ctx):
    return stops(run_test(ctx, DEEPVIT, ctx.ws / 'epoch_9.pth'))


@scenario('checkpoint-empty')
def _(ctx):
    (ctx.ws / 'empty.pth').write_bytes(b'')
    return stops(run_test(ctx, DEEPVIT, ctx.ws / 'empty.pth'))


@scenario('checkpoint-truncated')
def _(ctx):
    data = ctx.ckpt[DEEPVIT].read_bytes()
    (ctx.ws / 'truncated.pth').write_bytes(data[: len(data) // 3])
    return stops(run_test(ctx, DEEPVIT, ctx.ws / 'truncated.pth'))


@scenario('checkpoint-not-a-checkpoint')
def _(ctx):
    torch.save([1, 2, 3], ctx.ws / 'list.pth')
    return stops(run_test(ctx, DEEPVIT, ctx.ws / 'list.pth'))


@scenario('checkpoint-not-a-file')
def _(ctx):
    work_dir = ctx.runs[DEEPVIT]  # the folder instead of its epoch_1.pth
    return stops(run_test(ctx, DEEPVIT, work_dir), check=one_line_naming(work_dir))


@scenario('checkpoint-odd-tensor')
def _(ctx):
    """The test's own checkpoint (trusted: read without the allow-list) with one weight cast to float8."""
    checkpoint = torch.load(ctx.ckpt[DEEPVIT], weights_only=False)
    key = next(k for k, v in checkpoint['state_dict'].items() if v.is_floating_point())
    checkpoint['state_dict'][key] = checkpoint['state_dict'][key].to(torch.float8_e4m3fn)
    torch.save(checkpoint, ctx.ws / 'float8.pth')
    return stops(run_test(ctx, DEEPVIT, ctx.ws / 'float8.pth'), check=one_line_naming(ctx.ws / 'float8.pth'))


@scenario('checkpoint-unsafe-pickle')
def _(ctx):
    from test_safe_loading import code_running_checkpoint

    marker = ctx.ws.parent / 'unsafe_pickle_ran'
    ckpt = code_running_checkpoint(ctx.ws / 'unsafe.pth', ctx.ckpt[DEEPVIT], marker)

    def check(message):
        _names(message, ckpt)
        assert 'the global exec' in message and '--unsafe-load' in message, message
        assert not marker.exists(), 'the pickle ran'

    return stops(run_test(ctx, DEEPVIT, ckpt), check=check)


@scenario('checkpoint-other-model')
def _(ctx):
    """Every technique's test config given the checkpoint of the next technique."""
    pairs = zip(TECHNIQUES, TECHNIQUES[1:] + TECHNIQUES[:1])
    runs = [run_test(ctx, config, ctx.ckpt[other]) for config, other in pairs]
    return lambda: '\n'.join(stop_message(run) for run in runs)


@scenario('checkpoint-non-finite')
def _(ctx):
    checkpoint = torch.load(ctx.ckpt[DEEPVIT], weights_only=False)
    next(v for v in checkpoint['state_dict'].values() if v.is_floating_point()).view(-1)[0] = float('nan')
    torch.save(checkpoint, ctx.ws / 'nan_weights.pth')
    return stops(run_test(ctx, DEEPVIT, ctx.ws / 'nan_weights.pth'), check=one_line_naming(ctx.ws / 'nan_weights.pth'))


@scenario('resume-state-mismatch')
def _(ctx):
    cfg = derived(
        ctx,
        'deepvit_steplr',
        DEEPVIT,
        """
        param_scheduler = [dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=2, convert_to_iter_based=True),
                           dict(type='StepLR', step_size=1, gamma=0.1, by_epoch=True, begin=2, end=30)]
    """,
    )
    return stops(run_train(ctx, cfg, '--resume', ctx.ckpt[DEEPVIT]), check=one_line_naming(ctx.ckpt[DEEPVIT]))


@scenario('ema-copy-empty')
def _(ctx):
    cfg = derived(
        ctx,
        'deepvit_lazy_ema',
        DEEPVIT,
        """
        custom_hooks = [dict(type='test_honest_weights.LazyEMAHook', priority='ABOVE_NORMAL')]
        custom_imports = dict(imports=['test_honest_weights'], allow_failed_imports=False)
    """,
    )
    return stops(run_test(ctx, cfg, ctx.ckpt[DEEPVIT], '--allow-partial'), check=one_line_naming(ctx.ckpt[DEEPVIT]))


@scenario('ema-unpaired')
def _(ctx):
    checkpoint = torch.load(ctx.ckpt[DEEPVIT], weights_only=False)
    checkpoint['ema_state_dict'] = {
        **{'module.' + k: v for k, v in checkpoint['state_dict'].items()},
        'module.backbone.extra': torch.zeros(3),
    }
    torch.save(checkpoint, ctx.ws / 'unpaired_ema.pth')
    cfg = derived(ctx, 'deepvit_ema', DEEPVIT, "custom_hooks = [dict(type='EMAHook', priority='ABOVE_NORMAL')]\n")
    return stops(run_test(ctx, cfg, ctx.ws / 'unpaired_ema.pth'), check=one_line_naming(ctx.ws / 'unpaired_ema.pth'))


@scenario('resume-other-model')
def _(ctx):
    return stops(run_train(ctx, DEEPVIT, '--resume', ctx.ckpt[LVVIT_TL]))


@scenario('resume-unreadable-newest')
def _(ctx):
    work = ctx.ws / 'resume_newest'
    work.mkdir()
    shutil.copy(ctx.ckpt[DEEPVIT], work / 'epoch_1.pth')
    (work / 'epoch_2.pth').write_bytes(ctx.ckpt[DEEPVIT].read_bytes()[:500])
    (work / 'last_checkpoint').write_text(str(work / 'epoch_2.pth'))

    def run():
        run_train(ctx, DEEPVIT, '--resume', work=work)()  # resumes after epoch 1 of 1: nothing left to train
        log = next(work.rglob('*.log')).read_text()
        assert f'--resume auto: resuming from {work / "epoch_1.pth"}' in log
        return log

    return run


@scenario('resume-not-resumable')
def _(ctx):
    """As mmengine's CheckpointHook saves a best checkpoint: without the optimizer's and the schedulers' states."""
    checkpoint = torch.load(ctx.ckpt[DEEPVIT], weights_only=False)
    del checkpoint['optimizer'], checkpoint['param_schedulers']
    torch.save(checkpoint, ctx.ws / 'best_accuracy_top1_epoch_1.pth')
    return stops(
        run_train(ctx, DEEPVIT, '--resume', ctx.ws / 'best_accuracy_top1_epoch_1.pth'),
        check=one_line_naming(ctx.ws / 'best_accuracy_top1_epoch_1.pth'),
    )


@scenario('resume-beyond-max-epochs')
def _(ctx):
    """A checkpoint after 3 epochs, resumed with max_epochs=1."""
    checkpoint = torch.load(ctx.ckpt[DEEPVIT], weights_only=False)
    checkpoint['meta'].update(epoch=3, iter=3 * checkpoint['meta']['iter'])
    torch.save(checkpoint, ctx.ws / 'epoch_3.pth')
    return stops(
        run_train(ctx, DEEPVIT, '--resume', ctx.ws / 'epoch_3.pth'), check=one_line_naming(ctx.ws / 'epoch_3.pth')
    )


def tiny_lvvit_release(path):
    """An official LV-ViT release (TokenLabeling key names and shapes) much narrower than the digits models."""
    from test_model_converters import official_state_dict

    torch.save(
        {
            'state_dict': official_state_dict(
                dim=24, depth=1, heads=4, qkv_bias=False, stem=(8, 3), aux_head=True, classes=10, img_size=32
            )
        },
        path,
    )
    return path


@scenario('load-from-other-model')
def _(ctx):
    release = tiny_lvvit_release(ctx.ws / 'lvvit_release.pth')
    return stops(
        run_train(ctx, DEEPVIT, load_from=release),
        check=lambda message: _names(message, release) or _names(message, 'official LV-ViT'),
    )


@scenario('load-from-unexpected-layers')
def _(ctx):
    """The talking-heads DiversePatch release (tiny: two blocks of 16 channels) in the plain-attention digits
    DiversePatch config at its width and depth."""
    from test_diversepatch_converter import official_state_dict

    config = ctx.ws / 'diversepatch_as_release.py'
    config.write_text(
        f"_base_ = '{DIVERSEPATCH}'\n"
        "model = dict(backbone=dict(img_size=32, patch_size=8, arch=dict(_delete_=True, embed_dims=16, "
        "num_layers=2, num_heads=2, feedforward_channels=64)), head=dict(num_classes=5, in_channels=16), "
        "aux_losses=[dict(type='mmvitreg.PatchCosineLoss'), dict(type='mmvitreg.PatchContrastiveLoss'), "
        "dict(type='mmvitreg.PatchMixingLoss', num_classes=5, in_channels=16)])\n"
    )
    torch.save({'model': official_state_dict()}, ctx.ws / 'talking_heads_release.pth')

    def check(message):
        assert 'proj_pre' in message and "attn_types='talking_heads'" in message, message

    return stops(run_train(ctx, config, load_from=ctx.ws / 'talking_heads_release.pth'), check=check)


@scenario('checkpoint-remote-unreadable')
def _(ctx):
    return stops(
        run_test(ctx, DEEPVIT, 'nobackend://models.example/deepvit.pth'),
        check=lambda message: _names(message, 'nobackend://models.example/deepvit.pth'),
    )


@scenario('official-checkpoint-unconvertible')
def _(ctx):
    from test_diversepatch_converter import official_state_dict

    deit = {k: v for k, v in official_state_dict().items() if '.proj_p' not in k and not k.startswith('patch_head')}
    torch.save(
        {'model': {**deit, 'dist_token': torch.zeros(1, 1, 16), 'head_dist.weight': torch.zeros(5, 16)}},
        ctx.ws / 'deit_distilled.pth',
    )
    return stops(
        run_test(ctx, DEEPVIT, ctx.ws / 'deit_distilled.pth'), check=lambda message: _names(message, 'dist_token')
    )


@scenario('converter-other-model')
def _(ctx):
    from checkpoint_converter import converter_cli
    from mmpretrain.models import SwinTransformer

    from mmvitreg.models.backbones.deepvit import convert_deepvit

    src, dst = ctx.ws / 'swin_official.pth', ctx.ws / 'converted.pth'
    torch.save({'model': SwinTransformer(arch='tiny', img_size=32, window_size=4).state_dict()}, src)
    return stops(lambda: converter_cli(convert_deepvit, 'DeepViT', argv=[str(src), str(dst)]))


@scenario('converter-unsafe-pickle')
def _(ctx):
    from checkpoint_converter import converter_cli
    from test_safe_loading import code_running_checkpoint

    from mmvitreg.models.backbones.deepvit import convert_deepvit

    marker = ctx.ws.parent / 'converter_pickle_ran'
    src = code_running_checkpoint(ctx.ws / 'unsafe_release.pth', ctx.ckpt[DEEPVIT], marker)

    def check(message):
        assert '\n' not in message and 'the global exec' in message and not marker.exists(), message

    return stops(lambda: converter_cli(convert_deepvit, 'DeepViT', argv=[str(src), str(ctx.ws / 'out.pth')]), check)


@scenario('export-checkpoint-other-model')
def _(ctx):
    """In its own process, as a user runs it (in this one the loader's log line would go to an earlier run's log)."""
    from conftest import run_tool

    def run():
        proc = run_tool(
            ['deployment/pytorch2onnx.py', DEEPVIT, ctx.ckpt[LVVIT_TL], '--out', ctx.ws / 'other.onnx'],
            cwd=ctx.ws.parent,
            check=False,
        )
        assert proc.returncode == 1 and 'Traceback' not in proc.stderr, proc.stderr[-3000:]
        _names(proc.stderr, ctx.ckpt[LVVIT_TL])
        return proc.stderr

    return run


# ---------------------------------------------------------------- training
@scenario('nan-loss')
def _(ctx):
    # every technique with an absurd learning rate: a finite first step, weights of ~1e30, then non-finite losses
    runs = [
        run_train(ctx, config, **{'optim_wrapper.optimizer.lr': 1e30, 'train_dataloader.dataset.indices': 16})
        for config in TECHNIQUES
    ]

    def check(message):
        assert re.search(r'non-finite loss at iteration \d+ \(epoch 1\): loss\w* = (nan|-?inf)', message), message

    return lambda: '\n'.join(stops(run, check)() for run in runs)


@scenario('nan-weights')
def _(ctx):
    # a step whose loss is finite but whose update leaves a weight NaN (the test hook plays the overflowing step)
    cfg = derived(
        ctx,
        'deepvit_poisoned',
        DEEPVIT,
        """
        custom_hooks = [dict(type='test_non_finite_weights.PoisonHook', at=1, when='iter')]
        custom_imports = dict(imports=['test_non_finite_weights'], allow_failed_imports=False)
    """,
    )

    def check(message):
        assert 'is not written and the run stops; this run has no resumable checkpoint yet' in message, message
        assert '\n' not in message.strip(), message

    return stops(run_train(ctx, cfg), check=check)


# ---------------------------------------------------------------- the tests
def test_every_catalogue_case_has_a_scenario_and_the_catalogue_is_large_enough():
    assert sorted(SCENARIOS) == sorted(c.id for c in CASES)
    assert len(CASES) >= 20


@pytest.mark.parametrize('case', CASES, ids=lambda c: c.id)
def test_case_stops_with_its_message_and_writes_nothing(ctx, case):
    run = SCENARIOS[case.id](ctx)  # prepares the bad input
    before = files_of(ctx.ws)
    output = run()
    assert case.message in output, output[-3000:]
    after = files_of(ctx.ws)
    changed = [k for k, v in before.items() if after.get(k) != v]
    assert not changed, f'files changed or lost: {changed}'
    written = [k for k in set(after) - set(before) if k.endswith(('.pth', '.tmp')) or 'last_checkpoint' in k]
    assert not written, f'checkpoints written: {written}'


def test_troubleshooting_doc_is_generated_from_the_catalogue():
    doc = (REPO / 'docs' / 'troubleshooting.md').read_text()
    assert doc == render_markdown(), 'run python tools/misc/gen_troubleshooting.py'
    assert all(case.message in doc and case.fix in doc for case in CASES)
