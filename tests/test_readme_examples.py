"""The README's "Put a technique into your config" blocks, as written, on the mmpretrain recipe the README names:
each builds and its training loss has the terms of its technique; token labeling asks for its label maps."""

import re

import pytest
import torch
from conftest import REPO
from mmengine.registry import init_default_scope

README = (REPO / 'README.md').read_text()
SECTION = README[README.index('## Put a technique into your config') : README.index('## Train and test')]
BASE = re.search(r"Start each with `(_base_ = '[^`]+')`", SECTION).group(1)
BLOCKS = dict(re.findall(r'\*\*([^*]+)\*\*[^`]*```python\n(.*?)```', SECTION, re.S))
# technique -> (model type, the loss terms beside `loss` its training step returns)
EXPECTED = {
    'TL-Align': ('TokenClassifier', {'tla_shift'}),
    'DRLoc': ('TokenClassifier', {'loss_drloc'}),
    'DiversePatch': ('TokenClassifier', {'loss_patch_cos', 'loss_patch_contrastive'}),
    'Re-attention (DeepViT)': ('ImageClassifier', set()),
    'Token labeling (LV-ViT)': ('TokenClassifier', None),  # None: needs label maps in the pipeline
}


def test_the_readme_shows_one_block_per_technique():
    assert BASE == "_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'"
    assert sorted(BLOCKS) == sorted(EXPECTED)


@pytest.mark.parametrize('name', sorted(EXPECTED))
def test_readme_block_builds_on_the_named_recipe_and_trains_its_technique(name, tmp_path):
    from mmpretrain.registry import MODELS
    from mmpretrain.structures import DataSample

    from mmvitreg.utils import load_config

    config = tmp_path / 'my_config.py'
    config.write_text(f'{BASE}\n{BLOCKS[name]}')
    cfg = load_config(str(config))
    init_default_scope(cfg.default_scope)
    cfg.model.setdefault('data_preprocessor', cfg.data_preprocessor)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model).train()
    model_type, terms = EXPECTED[name]
    assert type(model).__name__ == model_type
    # 112 pixels (a 7x7 grid): the backbones resize their position embeddings, at a quarter of 224's cost
    images = [torch.randint(0, 256, (3, 112, 112), dtype=torch.uint8) for _ in range(2)]
    data = model.data_preprocessor(
        dict(inputs=images, data_samples=[DataSample().set_gt_label(i) for i in (3, 7)]), True
    )
    if terms is None:
        with pytest.raises(ValueError, match="TokenLabelHead needs 'token_label'.*LoadTokenLabelMap"):
            model(**data, mode='loss')
        return
    losses = model(**data, mode='loss')
    assert set(losses) == {'loss'} | terms
    assert all(torch.isfinite(v).all() for v in losses.values())
