"""DiversePatch §3 diagnostic: patch-wise absolute cosine similarity per layer for ViT blocks, Swin stage inputs
and ResNet stages (forward hooks), and tools/analysis_tools/patch_cosine_similarity.py (CSV + plot, several
checkpoints on one plot)."""

import csv
import importlib.util

import pytest
import torch
from conftest import CONFIGS, REPO
from guard_helpers import build_workspace
from mmpretrain.models import ResNet
from studies.patch_similarity import patch_cosine_per_layer

from mmvitreg.models.backbones import SwinTransformer, VisionTransformer
from mmvitreg.models.losses import patch_cosine_similarity
from mmvitreg.models.trace import TokenTrace

X = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))


def test_vit_blocks_match_the_traced_block_outputs_without_the_cls_token():
    vit = VisionTransformer(
        arch=dict(embed_dims=16, num_layers=3, num_heads=2, feedforward_channels=32), img_size=32, patch_size=8
    ).eval()
    names, values = patch_cosine_per_layer(vit, [X[:2], X[2:]])
    trace = TokenTrace(token_layers=(0, 1, 2))
    with torch.no_grad():
        vit(X, trace=trace)
    assert names == ['block 1', 'block 2', 'block 3']
    expected = [patch_cosine_similarity(trace.patch_tokens(i)).mean().item() for i in range(3)]
    assert values == pytest.approx(expected, rel=1e-5)


def test_swin_reads_the_input_of_every_downsampling_and_the_last_stage():
    swin = SwinTransformer(
        arch=dict(embed_dims=16, depths=[1, 1, 2], num_heads=[1, 2, 4]), img_size=32, window_size=2, out_indices=(2,)
    ).eval()
    names, values = patch_cosine_per_layer(swin, [X])
    trace = TokenTrace(token_layers=(0, 1, 3))  # the last block of each stage, before merging
    with torch.no_grad():
        swin(X, trace=trace)
    assert names == ['stage 1', 'stage 2', 'stage 3']
    assert values == pytest.approx(
        [patch_cosine_similarity(trace.tokens[i]).mean().item() for i in (0, 1, 3)], rel=1e-5
    )


def test_resnet_stages_treat_every_location_as_a_patch():
    resnet = ResNet(depth=18, out_indices=(0, 1, 2, 3))
    resnet.eval()  # mmpretrain's ResNet.train returns None
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))  # 2x2 locations in the last stage
    names, values = patch_cosine_per_layer(resnet, [x])
    with torch.no_grad():
        outs = resnet(x)
    assert names == [f'stage {i}' for i in range(1, 5)]
    # hand-written P(h) over the H*W locations of the first stage's output of one image
    h = outs[0][0].flatten(1).t()
    n = h.shape[0]
    hn = h / h.norm(dim=1, keepdim=True)
    direct = ((hn @ hn.t()).abs().sum() - n) / (n * (n - 1))
    assert patch_cosine_similarity(outs[0][:1].flatten(2).transpose(1, 2)).item() == pytest.approx(
        direct.item(), rel=1e-4
    )
    assert values == pytest.approx(
        [patch_cosine_similarity(o.flatten(2).transpose(1, 2)).mean().item() for o in outs], rel=1e-5
    )
    with pytest.raises(TypeError, match='ViT-family, Swin and ResNet'):
        patch_cosine_per_layer(torch.nn.Conv2d(3, 3, 1), [X])


def test_tool_writes_csv_and_plot_for_several_checkpoints(tmp_path, capfd):
    spec = importlib.util.spec_from_file_location(
        'pcs', REPO / 'tools' / 'analysis_tools' / 'patch_cosine_similarity.py'
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    config = CONFIGS / 'diversepatch' / 'deit-deep-narrow_1xb64_diversepatch_digits.py'
    data_root = str(build_workspace(tmp_path) / 'digits')
    from mmengine.registry import init_default_scope

    from mmvitreg.utils import load_config

    cfg = load_config(str(config), {'val_dataloader.dataset.data_root': data_root})
    init_default_scope(cfg.default_scope)
    ckpts = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = tool.build_model(cfg, None, 'cpu')
        ckpts.append(tmp_path / f'seed{seed}.pth')
        torch.save({'state_dict': model.state_dict()}, ckpts[-1])
    out = tmp_path / 'pcs'
    tool.main(
        [
            str(config),
            '--checkpoints',
            *map(str, ckpts),
            '--labels',
            'a',
            'b',
            '--num-images',
            '8',
            '--batch-size',
            '4',
            '--device',
            'cpu',
            '--out',
            str(out),
            '--cfg-options',
            f'val_dataloader.dataset.data_root={data_root}',
        ]
    )
    rows = list(csv.DictReader(open(f'{out}.csv')))
    assert [(r['label'], r['layer']) for r in rows] == [(lab, str(i)) for lab in 'ab' for i in range(1, 13)]
    assert all(0 <= float(r['patch_cosine_similarity']) <= 1 for r in rows)
    assert rows[0]['patch_cosine_similarity'] != rows[12]['patch_cosine_similarity']  # two different models
    assert (tmp_path / 'pcs.png').stat().st_size > 1000
    printed = capfd.readouterr().out
    assert printed.count('8/8') == 2 and 'note:' not in printed  # a progress bar per checkpoint
    tool.main(
        [
            str(config),
            '--num-images',
            '40',
            '--batch-size',
            '16',
            '--device',
            'cpu',
            '--out',
            str(out),
            '--cfg-options',
            f'val_dataloader.dataset.data_root={data_root}',
        ]
    )
    printed = capfd.readouterr().out
    assert 'note: the val split holds only 32 images, fewer than the 40 asked' in printed
    assert 'Initialized by' not in printed  # the untrained model's init log stays out of the output


def test_tool_reads_the_backbone_of_a_segmentor(tmp_path):
    """The digits UperNet Swin-nano (a TokenSegmentor with the cosine loss): its Swin's four stages, on the images
    of mmseg's test pipeline through the segmentor's data preprocessor; the last stage's value is the mean P(h) of
    the backbone's last-stage tokens before its norm (what the cosine loss reads in training)."""
    from digits import BUILDERS
    from mmengine.registry import init_default_scope

    from mmvitreg.utils import load_config

    spec = importlib.util.spec_from_file_location(
        'pcs', REPO / 'tools' / 'analysis_tools' / 'patch_cosine_similarity.py'
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    config = CONFIGS / 'diversepatch' / 'upernet_swin-nano_patch-cos_1xb8-2k_digits-ade20k-128x128.py'
    data_root = str(tmp_path / 'digits_ade20k')
    BUILDERS['ade20k'](data_root, num_train=1, num_val=3)
    options = {'val_dataloader.dataset.data_root': data_root}
    out = tmp_path / 'seg'
    tool.main(
        [
            str(config),
            '--num-images',
            '3',
            '--batch-size',
            '2',
            '--device',
            'cpu',
            '--out',
            str(out),
            '--cfg-options',
            *[f'{k}={v}' for k, v in options.items()],
        ]
    )
    rows = list(csv.DictReader(open(f'{out}.csv')))
    assert [r['name'] for r in rows] == [f'stage {i}' for i in range(1, 5)]
    cfg = load_config(str(config), options)
    init_default_scope(cfg.default_scope)
    torch.manual_seed(0)
    model = tool.build_model(cfg, None, 'cpu')
    loader = tool.build_dataloader(cfg, 'val', 3, num_workers=0)
    inputs = next(tool.inputs_of(model, loader, 3, 'val', 'cpu'))
    trace = TokenTrace.for_request(model.aux_losses[0].trace_request)
    with torch.no_grad():
        model.backbone(inputs, trace=trace)
    names, values = patch_cosine_per_layer(model.backbone, [inputs])
    assert values[-1] == pytest.approx(patch_cosine_similarity(trace.patch_tokens(-1)).mean().item(), rel=1e-5)
