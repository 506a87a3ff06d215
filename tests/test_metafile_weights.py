"""Every released checkpoint the metafiles list loads into the config its entry names, strictly (issue 31, item 2).

For each ``Converted From`` entry of ``model-index.yml``, random tensors under the official release's key names and
shapes (the architecture of the official code: ``OFFICIAL``) go through the loading pass (detect the layout,
convert, fit) into the entry's config's model, built at full size on the meta device, with the *strict* policy:
no key missing, none left over, none of another shape."""

import pytest
import torch
from conftest import REPO
from mmengine.registry import MODELS, DefaultScope
from modelindex import load as load_model_index
from test_model_converters import official_state_dict

from mmvitreg.engine.checkpoint import fill_model

LVVIT = dict(qkv_bias=False, aux_head=True)
# entry -> official_state_dict arguments (the official codes' architectures) and whether it has talking heads
OFFICIAL = {
    'deepvit-24b_8xb32_in1k': dict(dim=384, depth=24, heads=12, reattn=range(24)),
    'deepvit-32b_8xb32_in1k': dict(dim=384, depth=32, heads=12, reattn=range(32)),
    'deepvit-s_8xb32_in1k': dict(dim=396, depth=16, heads=12, reattn=range(11, 16), stem=(64, 2)),
    'deepvit-l_8xb32_in1k': dict(dim=420, depth=32, heads=12, reattn=range(20, 32), stem=(64, 2)),
    'lvvit-t_8xb128_tl_in1k': dict(dim=240, depth=12, heads=4, stem=(64, 3), **LVVIT),
    'lvvit-s_8xb128_tl_in1k': dict(dim=384, depth=16, heads=6, stem=(64, 3), **LVVIT),
    'lvvit-s_8xb64_tl_in1k-384px': dict(dim=384, depth=16, heads=6, stem=(64, 3), img_size=384, **LVVIT),
    'lvvit-m_8xb128_tl_in1k': dict(dim=512, depth=20, heads=8, stem=(64, 3), **LVVIT),
    'lvvit-m_8xb64_tl_in1k-384px': dict(dim=512, depth=20, heads=8, stem=(64, 3), img_size=384, **LVVIT),
    'lvvit-l_8xb64_tl_in1k-448px': dict(dim=768, depth=24, heads=12, stem=(128, 3), img_size=448, **LVVIT),
    'deit-base12-talking-heads_4xb256-400e_diversepatch_in1k': dict(
        dim=768, depth=12, heads=12, mlp_ratio=4, talking_heads=True
    ),
    'deit-base24-talking-heads_4xb256-400e_diversepatch_in1k': dict(
        dim=768, depth=24, heads=12, mlp_ratio=4, talking_heads=True
    ),
    'vit-large-p16_8xb128-30e_diversepatch_in21k-pre_in1k': dict(dim=1024, depth=24, heads=16, mlp_ratio=4),
    'vit-large-p16_8xb128-30e_diversepatch_in21k-pre_in1k-384px': dict(
        dim=1024, depth=24, heads=16, mlp_ratio=4, img_size=384
    ),
}
pytestmark = pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter")
DIVERSEPATCH = 'tools/model_converters/diversepatch_to_mmvitreg.py SRC DST'


def released():
    index = load_model_index(str(REPO / 'model-index.yml'))
    return {m.name: m.data for m in index.models if m.data.get('Converted From')}


def official_release(name: str, converter: str) -> dict:
    """Random tensors under the official names and shapes of the release of entry ``name``."""
    kwargs = dict(OFFICIAL[name])
    talking_heads = kwargs.pop('talking_heads', False)
    sd = official_state_dict(**kwargs)
    if converter.endswith(DIVERSEPATCH):  # deit/models.py: patch_head beside head; use_talk: proj_pre / proj_post
        dim, heads = kwargs['dim'], kwargs['heads']
        sd.update({'patch_head.weight': torch.zeros(1000, dim), 'patch_head.bias': torch.zeros(1000)})
        for i in range(kwargs['depth'] if talking_heads else 0):
            sd.update(
                {
                    f'blocks.{i}.attn.proj_pre.weight': torch.zeros(heads, heads),
                    f'blocks.{i}.attn.proj_post.weight': torch.zeros(heads, heads),
                }
            )
    return sd


def test_the_table_covers_every_released_entry():
    assert set(OFFICIAL) == set(released())


@pytest.mark.parametrize('name', sorted(OFFICIAL))
def test_released_weights_load_strictly_into_the_config_their_entry_names(name):
    from mmvitreg.utils import load_config

    entry = released()[name]
    cfg = load_config(str(REPO / entry['Config']))
    model_cfg = cfg.model.copy()
    model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    with DefaultScope.overwrite_default_scope(cfg.default_scope), torch.device('meta'):
        model = MODELS.build(model_cfg)
    checkpoint = {'model': official_release(name, entry['Converted From']['Converter'])}
    fill_model(model, checkpoint)  # strict: raises CheckpointError on any misfit
