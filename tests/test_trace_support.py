"""tools/analysis_tools/trace_support.py: a trace user x backbone table over every registered user and
trace backbone, each cell the verdict of the build-time check; --help, --user and --backbone."""
import pytest
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

from conftest import REPO, run_tool
from mmvitreg.analysis.trace_support import MMPRETRAIN, OK, support_table
from mmvitreg.models.trace import TraceUserError
from mmvitreg.registry import MODELS


@pytest.fixture(scope='module')
def table():
    return support_table()


def test_every_registered_trace_user_and_trace_backbone_is_in_the_table(table):
    users = {n for n, cls in MODELS.module_dict.items()
             if hasattr(cls, 'trace_request') and not n.startswith('Toy')}
    backbones = {n for n, cls in MODELS.module_dict.items() if getattr(cls, 'accepts_trace', False)
                 and cls.__module__.startswith('mmvitreg')}
    assert {'TLAlign', 'DRLoc', 'AttentionCosineLoss', 'TokenLabelHead', 'MixToken', 'PatchContrastiveLoss'} <= users
    assert 'CvT' in backbones
    assert set(table) == backbones | {MMPRETRAIN}
    for row in table.values():
        assert users <= set(row)


def test_cells_give_the_short_reason_of_the_check(table):
    assert table['CvT']['TLAlign'] == 'no stream'
    assert table['SwinTransformer']['TLAlign'] == OK
    assert table['SwinTransformer']['AttentionCosineLoss'] == 'no isotropic'  # windowed maps do not line up
    assert table['VisionTransformer']['AttentionCosineLoss'] == 'only 12 blocks'  # num_pairs=12 taps block 12
    assert table['DeepViT']['AttentionCosineLoss'] == OK
    assert table[MMPRETRAIN]['TLAlign'] == 'no trace'
    assert table[MMPRETRAIN]['DRLoc'] == OK


def test_a_cell_is_what_building_the_model_raises():
    """TL-Align on a CvT: the TokenClassifier fails to build with the error whose reason the table shows."""
    cvt = dict(type='mmvitreg.CvT', arch=dict(embed_dims=(8, 16), depths=(1, 2), num_heads=(1, 2)),
               embed_kernels=(3, 3), embed_strides=(2, 2), embed_paddings=(1, 1))
    cfg = dict(type='mmvitreg.TokenClassifier', backbone=cvt,
               head=dict(type='mmpretrain.LinearClsHead', num_classes=3, in_channels=16),
               target_transform=dict(type='mmvitreg.TLAlign', num_layers=3))
    with DefaultScope.overwrite_default_scope('mmpretrain'), pytest.raises(TraceUserError) as error:
        MMPRETRAIN_MODELS.build(cfg)
    assert "TLAlign needs ['stream']" in str(error.value) and 'CvT' in str(error.value)
    assert error.value.reason == support_table(['TLAlign'], ['CvT'])['CvT']['TLAlign']


def test_the_tool_prints_help_filters_and_rejects_unknown_names():
    tool = 'analysis_tools/trace_support.py'
    help_text = run_tool([tool, '--help'], cwd=REPO).stdout
    assert help_text.startswith('usage:') and '--user' in help_text and '--backbone' in help_text
    assert OK not in help_text

    out = run_tool([tool, '--user', 'TLAlign', 'drloc', '--backbone', 'CvT', 'mmpretrain'], cwd=REPO).stdout
    lines = out.splitlines()
    assert lines[0].split() == ['trace', 'user', 'CvT', MMPRETRAIN]
    assert lines[2].split() == ['DRLoc', OK, OK]
    assert lines[3].split() == ['TLAlign', 'no', 'stream', 'no', 'trace']
    assert 'CvT: checked as' in out and 'mmpretrain backbones' in out
    assert not any(ln.startswith(('MixToken', 'VisionTransformer')) for ln in lines)

    bad = run_tool([tool, '--user', 'TLAlgn'], cwd=REPO, check=False)
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines() == [bad.stderr.strip()]  # one line
    assert bad.stderr.startswith("error: unknown trace user 'TLAlgn'") and 'TLAlign' in bad.stderr
