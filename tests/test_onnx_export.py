"""tools/deployment/pytorch2onnx.py: every backbone's inference path (and a UperNet) exports to ONNX and
onnxruntime gives PyTorch's outputs (<= 1e-4) on random weights, at another batch size than traced."""

import importlib.util

import pytest
import torch
from conftest import CONFIGS, TOOLS, run_tool
from model_helpers import random_checkpoint

pytest.importorskip('onnxruntime', reason='the export tests need onnx and onnxruntime (requirements/tests.txt)')

spec = importlib.util.spec_from_file_location('pytorch2onnx', TOOLS / 'deployment' / 'pytorch2onnx.py')
pytorch2onnx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pytorch2onnx)

# name: (config, --cfg-options, (H, W)); the tiny digits models of each technique
CASES = {
    'vit': (CONFIGS / 'tlalign' / 'deit-tiny_1xb64_cutmix-tlalign_digits.py', {}, None),
    # DeepViT-S's re-attention: Θ as a 1x1 conv, BatchNorm, then the reatten_scale (transform_scale)
    'deepvit-reattention': (
        CONFIGS / 'deepvit' / 'deepvit-tiny_1xb64_digits.py',
        {'model.backbone.arch.attn_cfgs': dict(reattn=dict(transform_scale=True))},
        None,
    ),
    'talking-heads': (
        CONFIGS / 'diversepatch' / 'deit-deep-narrow_1xb64_diversepatch_digits.py',
        {'model.backbone.arch.attn_types': 'talking_heads', 'model.backbone.arch.num_layers': 4},
        None,
    ),
    'lvvit-token-labeling': (CONFIGS / 'lvvit' / 'lvvit-tiny_1xb64_tl_digits.py', {}, None),
    'swin': (CONFIGS / 'demo' / 'swin-nano_1xb64_mixtoken_digits.py', {}, None),
    'cvt': (CONFIGS / 'drloc' / 'cvt-tiny_1xb64_drloc_digits.py', {}, (32, 32)),
    # the pyramid pooling's adaptive pools export for a 6 x 6 last map: 192 / 32
    'upernet-swin': (CONFIGS / 'demo' / 'upernet_swin-nano_1xb8-300_digits-ade20k-128x128.py', {}, (192, 192)),
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_onnxruntime_equals_pytorch(name, tmp_path):
    config, options, shape = CASES[name]
    cfg = pytorch2onnx.load_config(str(config), options)
    shape = shape or pytorch2onnx.default_shape(cfg)
    random_checkpoint(cfg, tmp_path / 'random.pth')
    net = pytorch2onnx.export(cfg, str(tmp_path / 'random.pth'), str(tmp_path / 'model.onnx'), shape)
    state = torch.load(tmp_path / 'random.pth')['state_dict']
    assert all(torch.equal(v, state[k]) for k, v in net.model.state_dict().items())  # the checkpoint's weights
    diff = pytorch2onnx.max_abs_diff(net, str(tmp_path / 'model.onnx'), shape, batch_size=3)
    print(f'{name}: max |d| = {diff:.3g}')
    assert diff <= 1e-4


def test_tool_exports_and_verifies_deepvit(tmp_path):
    """The command line, on DeepViT-S's re-attention (the case the TorchScript exporter used to refuse)."""
    config, options, _ = CASES['deepvit-reattention']
    random_checkpoint(pytorch2onnx.load_config(str(config), options), tmp_path / 'epoch_1.pth')
    proc = run_tool(
        [
            'deployment/pytorch2onnx.py',
            config,
            tmp_path / 'epoch_1.pth',
            '--verify',
            '--opset',
            17,
            '--cfg-options',
            'model.backbone.arch.attn_cfgs.reattn.transform_scale=True',
        ],
        cwd=tmp_path,
    )
    assert (tmp_path / 'epoch_1.onnx').is_file()
    assert 'inputs (batch, 3, 32, 32)' in proc.stdout
    assert float(proc.stdout.split('max |d| = ')[1].split()[0]) <= 1e-4


def test_tool_refuses_a_checkpoint_that_does_not_fit(tmp_path):
    config, _, _ = CASES['vit']
    torch.save(dict(state_dict={'backbone.cls_token': torch.zeros(1, 1, 96)}), tmp_path / 'partial.pth')
    proc = run_tool(['deployment/pytorch2onnx.py', config, tmp_path / 'partial.pth'], cwd=tmp_path, check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and 'Traceback' not in proc.stderr  # one error line, as tools/test.py
    assert (
        last.startswith(f'error: checkpoint {tmp_path / "partial.pth"} does not fit the model') and 'missing: ' in last
    )
    assert not (tmp_path / 'partial.onnx').exists()


def test_export_refuses_a_prediction_ensemble_it_would_drop(tmp_path):
    """DiversePatch's ``t_acc`` ensemble joins ``predict`` but not the exported head scores: an error, not
    a file that predicts differently."""
    config = CONFIGS / 'diversepatch' / 'deit-deep-narrow_1xb64_diversepatch_digits.py'
    cfg = pytorch2onnx.load_config(str(config), {'model.aux_losses.2.ensemble': True})
    random_checkpoint(cfg, tmp_path / 'random.pth')
    with pytest.raises(pytorch2onnx.ConfigError, match='PatchMixingLoss joins the prediction'):
        pytorch2onnx.export(cfg, str(tmp_path / 'random.pth'), str(tmp_path / 'model.onnx'), (32, 32))
    assert not (tmp_path / 'model.onnx').exists()
