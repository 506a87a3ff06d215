"""tools/analysis_tools/trace_support.py: a trace user x backbone table over every registered user and
trace backbone, each cell the verdict of the build-time check on a built instance; --help, --user, --backbone
and --config."""

import importlib.util
import inspect

import pytest
from conftest import REPO, TOOLS, run_tool
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from studies.trace_support import MMPRETRAIN, OK, USER_ARGS, USER_MODULES, cell, support_table, user_label

from mmvitreg.models.trace import TraceRequest, TraceSpec, TraceUserError
from mmvitreg.registry import MODELS

_SPEC = importlib.util.spec_from_file_location('trace_support_tool', TOOLS / 'analysis_tools' / 'trace_support.py')
trace_support_tool = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(trace_support_tool)


@pytest.fixture(scope='module')
def table():
    return support_table()


def test_every_registered_trace_user_and_trace_backbone_is_in_the_table(table):
    users = {
        n
        for n, cls in MODELS.module_dict.items()
        if cls.__module__.startswith(USER_MODULES)
        and isinstance(getattr(cls(**USER_ARGS.get(n, {})), 'trace_request', None), TraceRequest)
    }
    backbones = {
        n
        for n, cls in MODELS.module_dict.items()
        if cls.__module__.startswith('mmvitreg.models.backbones')
        and 'trace' in inspect.signature(cls.forward).parameters
    }
    assert {
        'TLAlign',
        'DRLoc',
        'AttentionCosineLoss',
        'TokenLabelHead',
        'MixToken',
        'PatchContrastiveLoss',
        'PatchCosineLoss',
        'PatchMixingLoss',
    } <= users
    assert 'CvT' in backbones
    assert set(table) == backbones | {MMPRETRAIN}
    for row in table.values():
        assert users <= set(row)


def test_a_row_is_the_request_of_a_built_instance(table):
    """The DiversePatch losses have no class-level request (it would hide their forms): each row is an instance,
    and a form that asks for other taps gets its own row with its own verdict."""
    for name in ('PatchContrastiveLoss', 'PatchCosineLoss', 'PatchMixingLoss'):
        assert 'trace_request' not in vars(MODELS.get(name))
    assert table['CvT']['PatchContrastiveLoss'] == 'no isotropic'
    assert table['CvT']["PatchContrastiveLoss(form='official')"] == 'no embed, final, isotropic'
    assert table['SwinTransformer']["PatchContrastiveLoss(form='official')"] == 'no embed, isotropic'
    assert table['CvT']['PatchCosineLoss'] == OK and table['CvT']["PatchCosineLoss(tokens='final_norm')"] == 'no final'
    assert table['CvT']["PatchMixingLoss(tokens='final_norm')"] == 'no final'


def test_the_tool_reports_the_users_of_a_config_as_configured(tmp_path, capsys):
    """--config: the rows are the config's trace users with their arguments, the verdicts those of the instances."""
    config = tmp_path / 'official_contrastive.py'
    config.write_text(
        f"_base_ = '{REPO}/configs/diversepatch/deit-deep-narrow_1xb64_diversepatch_digits.py'\n"
        "model = dict(aux_losses=[dict(type='mmvitreg.PatchContrastiveLoss', form='official')])\n"
    )
    table = support_table(backbones=['SwinTransformer', 'VisionTransformer'], config=str(config))
    assert table['SwinTransformer'] == {
        'mix: PatchCutMix(alpha=1.0, patch_size=8)': OK,
        "aux_losses[0]: PatchContrastiveLoss(form='official')": 'no embed, isotropic',
    }
    assert set(table['VisionTransformer'].values()) == {OK}
    trace_support_tool.main(
        ['--config', str(config), '--user', 'PatchContrastiveLoss', '--backbone', 'SwinTransformer']
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ['trace', 'user', 'VisionTransformer', '(config)', 'SwinTransformer']
    assert lines[2].split() == [
        'aux_losses[0]:',
        "PatchContrastiveLoss(form='official')",
        OK,
        'no',
        'embed,',
        'isotropic',
    ]
    with pytest.raises(SystemExit, match="error: config file not found: 'nowhere.py'"):
        trace_support_tool.main(['--config', 'nowhere.py'])


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
    cvt = dict(
        type='mmvitreg.CvT',
        arch=dict(embed_dims=(8, 16), depths=(1, 2), num_heads=(1, 2)),
        embed_kernels=(3, 3),
        embed_strides=(2, 2),
        embed_paddings=(1, 1),
    )
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=cvt,
        head=dict(type='mmpretrain.LinearClsHead', num_classes=3, in_channels=16),
        target_transform=dict(type='mmvitreg.TLAlign', num_layers=3),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'), pytest.raises(TraceUserError) as error:
        MMPRETRAIN_MODELS.build(cfg)
    assert "TLAlign needs the service ['stream']" in str(error.value) and 'CvT' in str(error.value)
    assert support_table(['TLAlign'], ['CvT'])['CvT']['TLAlign'] == 'no stream'


SPEC = TraceSpec(
    4,
    (8, 8, 16, 16),
    tappable=(2, 3),
    num_extra_tokens=1,
    services={'attn', 'mix', 'stream'},
    points={'embed', 'stages'},
    facts={'cls_token'},
    out_types=('featmap', 'raw'),
    out_type='raw',
    stage_channels=(8, 16),
    out_channels=(8, 16),
    patch_stride=16,
)
CELLS = [  # the part of the request the check refuses, in its order, in a few words
    (dict(trace=True), None, 'no trace'),
    (dict(outputs=(0,)), None, OK),
    (dict(stream=object()), dict(services={'mix'}), 'no stream'),
    (dict(points={'final'}, facts={'isotropic'}), SPEC, 'no final, isotropic'),
    (dict(services={'stream'}, points={'final'}), dict(), 'no stream, final'),
    (dict(token_layers=(4,)), SPEC, 'only 4 blocks'),
    (dict(attn_layers=(-5,)), SPEC, 'only 4 blocks'),
    (dict(stages=(2,)), SPEC, 'only 2 stages'),
    (dict(token_layers=(3, 1)), SPEC, 'taps 2..3 only'),
    (dict(out_type='featmap'), SPEC, f"{OK} out_type='featmap'"),
    (dict(out_type='cls_token'), SPEC, 'no cls_token output'),
    (dict(outputs=(2,)), SPEC, 'only 2 outputs'),
    (dict(token_layers=(0, -1), token_channels=(8, 8)), TraceSpec(4, (8, 8, 16, 16)), '8, 16 channels'),
    (dict(stages=(-1,), stage_channels=(8,)), SPEC, '16 channels'),
    (dict(outputs=(0,), out_channels=(16,)), SPEC, '8 channels'),
    (dict(stream=type('S', (), {'num_layers': 3})()), SPEC, '4 blocks, not 3'),
    (dict(patch_size=32), SPEC, 'patch_size 16'),
    (dict(token_layers=(-1,), attn_layers=(2,), points={'embed'}, out_type='raw', patch_size=16), SPEC, OK),
]


@pytest.mark.parametrize('request_args, spec, words', CELLS)
def test_a_cell_words_the_first_part_of_the_request_the_check_refuses(request_args, spec, words):
    """Each part of a request checked on its own, in the check's order, is what a cell says. A registered row's
    widths and patch size are the user's defaults, set per model (not judged); a user that needs an image-level
    target in a model kind without one reads 'image target' first."""
    spec = TraceSpec(1, (8,), **spec) if isinstance(spec, dict) else spec
    backbone = type('Net', (), {'trace_spec': spec})()
    user = type('User', (), {'trace_request': TraceRequest(**request_args)})()
    assert cell(backbone, user, registered=False) == words
    if words.endswith(('channels', 'patch_size 16')):
        assert cell(backbone, user) == OK
    user.image_target = True
    assert cell(backbone, user, 'TokenSegmentor', image_targets=False) == 'image target'


def test_a_users_label_names_its_arguments():
    assert user_label('PatchContrastiveLoss', {}) == 'PatchContrastiveLoss'
    assert user_label('X', dict(form='official', k=2)) == "X(form='official', k=2)"


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


def test_a_model_kind_without_image_targets_refuses_those_users_in_every_column():
    """--model-kind seg / det: the verdicts of building a TokenSegmentor / TokenCascadeRCNN, which refuse the users
    that train with an image-level target (the same check, ImageTargetError, with its reason)."""
    seg = support_table(
        ['TLAlign', 'MixToken', 'TokenLabelHead', 'PatchMixingLoss', 'DRLoc', 'PatchContrastiveLoss'],
        ['SwinTransformer', 'VisionTransformer', 'mmpretrain'],
        model_kind='seg',
    )
    for column in seg.values():
        for user in (
            'TLAlign',
            'MixToken',
            'TokenLabelHead',
            'PatchMixingLoss',
            "PatchMixingLoss(tokens='final_norm')",
        ):
            assert column[user] == 'image target'
        assert column['DRLoc'] == OK
    assert seg['SwinTransformer']['PatchContrastiveLoss'] == 'no isotropic'  # still the backbone's verdict
    assert seg['VisionTransformer']['PatchContrastiveLoss'] == OK
    det = support_table(['TLAlign'], ['SwinTransformer'], model_kind='det')
    assert det == {'SwinTransformer': {'TLAlign': 'image target'}}
    assert support_table(['TLAlign'], ['SwinTransformer'])['SwinTransformer']['TLAlign'] == OK  # cls: the default
    with pytest.raises(KeyError, match="unknown model kind 'panoptic'; known: cls, seg, det"):
        support_table(model_kind='panoptic')


def test_the_tool_prints_what_each_model_kind_serves(capsys):
    trace_support_tool.main(
        [
            '--model-kind',
            'det',
            '--user',
            'TLAlign',
            'DRLoc',
            'PatchContrastiveLoss',
            '--backbone',
            'SwinTransformer',
            'VisionTransformer',
        ]
    )
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[2].split() == ['DRLoc', OK, OK]
    assert lines[5].split() == ['TLAlign', 'image', 'target', 'image', 'target']
    kind = out[out.index('model kind det') :].splitlines()
    assert kind[0] == (
        'model kind det (mmdet: mmvitreg.TokenCascadeRCNN, mmvitreg.TokenMaskRCNN, '
        'mmvitreg.TokenFasterRCNN, mmvitreg.TokenTwoStageDetector)'
    )
    assert kind[1].startswith("  serves: DRLoc, PatchContrastiveLoss, PatchContrastiveLoss(form='official') (where")
    assert kind[2] == '  refuses (image-level target): TLAlign'
    assert "'image target': the user trains with one label per image" in out

    trace_support_tool.main(['--user', 'TLAlign', '--backbone', 'SwinTransformer'])  # cls by default
    out = capsys.readouterr().out
    assert out.splitlines()[2].split() == ['TLAlign', OK]
    assert 'model kind cls (mmpretrain: mmvitreg.TokenClassifier)' in out


def test_the_kind_of_a_config_is_its_models():
    """--config of a TokenSegmentor config: its aux_losses as configured, checked as a segmentor's, on its own
    backbone (the digits Swin: 256 channels, fits) and the preset asked for (Swin-T's 768 channels do not)."""
    config = REPO / 'configs' / 'demo' / 'upernet_swin-nano_1xb8-300_drloc_digits-ade20k-128x128.py'
    run = run_tool(['analysis_tools/trace_support.py', '--config', config, '--backbone', 'SwinTransformer'], cwd=REPO)
    lines = run.stdout.splitlines()
    assert lines[2].split() == [
        'aux_losses[0]:',
        'DRLoc(in_channels=256,',
        'layers=(-1,),',
        'num_pairs=64,',
        'loss_weight=0.5,',
        "target='abs',",
        "reduction='mean',",
        'replacement=True,',
        "init_cfg={'type':",
        "'TruncNormal',",
        "'layer':",
        "'Linear',",
        "'std':",
        '0.02,',
        "'bias':",
        '0.0})',
        OK,
        '768',
        'channels',
    ]
    assert 'model kind seg (mmseg: mmvitreg.TokenSegmentor)' in lines
