"""Inference through the libraries' own APIs (issue 22, part 3): mmpretrain's
``ImageClassificationInferencer`` / ``get_model`` and mmseg's ``MMSegInferencer`` run our configs and
checkpoints (a composed ``mmvitreg.TokenClassifier`` included) on the bundled digits and give the
predictions of the model's own test step; prediction builds no token trace unless the head asks for one."""

import numpy as np
import pytest
import torch
from conftest import CONFIGS
from mmengine.config import Config
from mmengine.dataset import Compose, pseudo_collate
from mmengine.registry import DefaultScope
from model_helpers import composed_config, random_checkpoint

from mmvitreg.models.trace import TokenTrace

CLASSES = tuple(f'digit_{i}' for i in range(10))
CLASSIFIERS = {
    'deit': CONFIGS / 'demo' / 'deit-tiny_1xb64_digits.py',
    'lvvit-token-labeling': CONFIGS / 'lvvit' / 'lvvit-tiny_1xb64_tl_digits.py',  # the head reads the trace
    'swin-mixtoken': CONFIGS / 'demo' / 'swin-nano_1xb64_mixtoken_digits.py',
    'composed': None,  # DeepViT + TL-Align + DRLoc + PatchCosineLoss (model_helpers.composed_config)
}


def config_of(name, tmp_path):
    return CLASSIFIERS[name] or composed_config(tmp_path)


def digit_images(workspace, n=4):
    return [str(p) for p in sorted((workspace / 'data' / 'digits_imagenet' / 'val').rglob('*.*'))[:n]]


def scores_of_test_step(model, cfg, images):
    """``pred_score`` of each image through the config's test pipeline and ``model.test_step``."""
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        pipeline = Compose(cfg.test_dataloader.dataset.pipeline)
        batch = pseudo_collate([pipeline(dict(img_path=p)) for p in images])
    with torch.no_grad():
        return np.stack([s.pred_score.numpy() for s in model.test_step(batch)])


@pytest.mark.parametrize('name', sorted(CLASSIFIERS))
def test_image_classification_inferencer_and_get_model(name, digits_workspace, tmp_path):
    from mmpretrain import get_model
    from mmpretrain.apis import ImageClassificationInferencer

    config = config_of(name, tmp_path)
    cfg = Config.fromfile(str(config))
    ckpt = random_checkpoint(cfg, tmp_path / 'weights.pth', meta=dict(dataset_meta=dict(classes=CLASSES)))
    images = digit_images(digits_workspace)

    inferencer = ImageClassificationInferencer(str(config), pretrained=str(ckpt), device='cpu')
    results = inferencer(images, batch_size=2)
    model = get_model(str(config), pretrained=str(ckpt), device='cpu')
    built = cfg.model.get('type', 'ImageClassifier').split('.')[-1]
    assert type(model).__name__ == type(inferencer.model).__name__ == built
    state = torch.load(ckpt, weights_only=False)['state_dict']
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    expected = scores_of_test_step(model.eval(), cfg, images)
    got = np.stack([r['pred_scores'] for r in results])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [r['pred_label'] for r in results] == expected.argmax(1).tolist()
    assert [r['pred_class'] for r in results] == [CLASSES[i] for i in expected.argmax(1)]


@pytest.mark.parametrize('name, head_asks', [('composed', False), ('lvvit-token-labeling', True)])
def test_prediction_builds_a_trace_only_when_the_head_asks(name, head_asks, digits_workspace, tmp_path, monkeypatch):
    """The composed model's trace users (TL-Align, DRLoc, PatchCosineLoss) train only: its prediction runs
    the backbone with ``trace=None`` and never makes a trace. The token-labeling head reads the grid from
    one, so LV-ViT's prediction makes exactly one per batch, with no taps."""
    from mmpretrain.apis import ImageClassificationInferencer

    config = config_of(name, tmp_path)
    ckpt = random_checkpoint(Config.fromfile(str(config)), tmp_path / 'weights.pth')
    inferencer = ImageClassificationInferencer(str(config), pretrained=str(ckpt), device='cpu')
    made, seen = [], []
    for_request = TokenTrace.for_request.__func__
    monkeypatch.setattr(
        TokenTrace, 'for_request', classmethod(lambda cls, *a, **k: made.append(for_request(cls, *a, **k)) or made[-1])
    )
    backbone = inferencer.model.backbone
    forward = backbone.forward
    monkeypatch.setattr(backbone, 'forward', lambda x, trace=None: seen.append(trace) or forward(x, trace=trace))
    inferencer(digit_images(digits_workspace), batch_size=2)
    assert len(seen) == 2
    if head_asks:
        assert len(made) == 2 and seen == made
        assert all(not t.token_layers and not t.attn_layers for t in made)
    else:
        assert made == [] and seen == [None, None]


def test_mmseg_inferencer_runs_a_upernet_config(digits_workspace, tmp_path):
    from mmseg.apis import MMSegInferencer, inference_model

    config = CONFIGS / 'demo' / 'upernet_swin-nano_1xb8-300_digits-ade20k-128x128.py'
    cfg = Config.fromfile(str(config))
    classes = ('background',) + CLASSES
    ckpt = random_checkpoint(cfg, tmp_path / 'weights.pth', meta=dict(dataset_meta=dict(classes=classes)))
    images = [
        str(p)
        for p in sorted((digits_workspace / 'data' / 'digits_ade20k' / 'images' / 'validation').glob('*.jpg'))[:2]
    ]
    inferencer = MMSegInferencer(str(config), weights=str(ckpt), device='cpu')
    results = inferencer(images, return_datasamples=True)
    assert type(inferencer.model.backbone).__module__.startswith('mmvitreg.')
    for image, result in zip(images, results):
        expected = inference_model(inferencer.model, image)  # mmseg's own single-image API
        seg = result.pred_sem_seg.data
        assert seg.shape == expected.pred_sem_seg.data.shape == (1, *result.ori_shape)
        assert torch.equal(seg, expected.pred_sem_seg.data)
        assert int(seg.max()) < len(classes)
