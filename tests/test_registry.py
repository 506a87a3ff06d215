"""`type='mmvitreg.X'` builds from mmpretrain, mmseg and mmdet registries under each library's own
default_scope, with no custom_imports and no import of mmvitreg by the caller (stack notes, §1.1). mmseg's and
mmdet's registries import their models, and with them ``mmcv.ops``, before they look a scope up: without mmcv's
compiled ops (mmcv-lite) that needs mmvitreg's stand-in in place, so there the caller imports mmvitreg first."""

import subprocess
import sys

import pytest
from conftest import needs_compiled_ops, tool_env

TINY_DEEPVIT = (
    "dict(type='mmvitreg.DeepViT', arch=dict(embed_dims=32, num_layers=2, num_heads=2, "
    "feedforward_channels=64, attn_types='reattn'), img_size=32, patch_size=16, out_type='featmap')"
)


def build_in_fresh_interpreter(scope, registry, cfg, first=False):
    """Build ``cfg`` from ``scope``'s ``registry`` in a fresh interpreter, importing mmvitreg ``first`` or never."""
    code = f"""
import sys
{'import mmvitreg' if first else ''}
from mmengine.registry import init_default_scope
init_default_scope('{scope}')
from {scope}.registry import {registry}
assert ('mmvitreg' in sys.modules) is {first}
obj = {registry}.build({cfg})
print(type(obj).__module__, type(obj).__name__)
"""
    proc = subprocess.run([sys.executable, '-c', code], env=tool_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()[-2:]


@pytest.mark.parametrize(
    'scope',
    ['mmpretrain', pytest.param('mmseg', marks=needs_compiled_ops), pytest.param('mmdet', marks=needs_compiled_ops)],
)
def test_backbone_builds_from_each_library_models_registry(scope):
    module, name = build_in_fresh_interpreter(scope, 'MODELS', TINY_DEEPVIT)
    assert (module, name) == ('mmvitreg.models.backbones.deepvit', 'DeepViT')


@pytest.mark.parametrize('scope', ['mmseg', 'mmdet'])
def test_backbone_builds_from_the_dense_registries_after_import_mmvitreg(scope):
    """The caller of a tool's kind (it imports mmvitreg first) on any mmcv, mmcv-lite included."""
    module, name = build_in_fresh_interpreter(scope, 'MODELS', TINY_DEEPVIT, first=True)
    assert (module, name) == ('mmvitreg.models.backbones.deepvit', 'DeepViT')


def test_token_mix_builds_from_mmpretrain_models_and_is_no_batch_augment():
    """A mixing plan must reach the model: it is a model component, not one of mmpretrain's batch augments."""
    module, name = build_in_fresh_interpreter('mmpretrain', 'MODELS', "dict(type='mmvitreg.MixToken')")
    assert name == 'MixToken' and module.startswith('mmvitreg.')
    with pytest.raises(AssertionError, match='mmvitreg.MixToken is not in the mmpretrain::batch augment registry'):
        build_in_fresh_interpreter('mmpretrain', 'BATCH_AUGMENTS', "dict(type='mmvitreg.MixToken')")


def test_transform_builds_from_mmpretrain_transforms():
    module, name = build_in_fresh_interpreter(
        'mmpretrain', 'TRANSFORMS', "dict(type='mmvitreg.TokenLabelTarget', token_label_size=14)"
    )
    assert name == 'TokenLabelTarget' and module.startswith('mmvitreg.')
