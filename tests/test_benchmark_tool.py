"""tools/analysis_tools/benchmark_train_step.py: the cases run side by side and report their ratios;
the case registry and the verdict behave as documented (no timing is asserted)."""
import re

import pytest

from conftest import run_tool
from studies import train_step_benchmark as bench

# the keys a tiny variant may change: sizes (widths, depths, heads, windows, grids, image size, pairs drawn),
# and the per-block attention kinds of a shortened arch
SIZE_KEYS = {'embed_dims', 'num_layers', 'num_heads', 'feedforward_channels', 'depths', 'channels', 'in_channels',
             'window_size', 'out_indices', 'img_size', 'patch_size', 'grid_pool', 'num_pairs', 'attn_types',
             'size'}  # a segmentor's data_preprocessor.size: the crop its batches are padded to


def test_tool_runs_every_case_with_tiny_models(tmp_path):
    proc = run_tool(['analysis_tools/benchmark_train_step.py', '--tiny', '--repeats', 1, '--warmup', 0,
                     '--batch-size', 2, '--img-size', 32, '--threads', 1, '--clock', 'cpu'], cwd=tmp_path)
    out = proc.stdout
    for name, case in bench.CASES.items():
        assert f'== {name}: {case.description}\nconfig {case.recipe()}\n' in out
    ratios = re.findall(r'time ratio (\d+\.\d+) \(target <= (\d+\.\d+)\): not judged;  memory ratio (\d+\.\d+)', out)
    assert len(ratios) == len(bench.CASES)
    assert all(float(t) > 0 and float(m) > 0 for t, _, m in ratios)
    assert {float(target) for _, target, _ in ratios} == {round(c.max_time_ratio, 3) for c in bench.CASES.values()}
    rows = re.findall(r'^(model|baseline) +(\d+\.\d) +(\d+\.\d)$', out, flags=re.M)
    assert len(rows) == 2 * len(bench.CASES) and all(float(ms) > 0 and float(mib) > 0 for _, ms, mib in rows)


def test_tiny_cases_build_the_models_they_promise():
    """deepvit-s-vs-msa: re-attention only in the model under test; plain-vs-mmpretrain: mmvitreg's
    backbone against mmpretrain's own VisionTransformer with the same numbers."""
    from mmvitreg.models.layers import ReAttention
    case = bench.get_case('deepvit-s-vs-msa')
    model, baseline = case.build('model', 32, True), case.build('baseline', 32, True)
    assert any(isinstance(m, ReAttention) for m in model.modules())
    assert not any(isinstance(m, ReAttention) for m in baseline.modules())
    assert type(model.backbone.patch_embed) is type(baseline.backbone.patch_embed)
    case = bench.get_case('plain-vs-mmpretrain')
    model, baseline = case.build('model', 32, True), case.build('baseline', 32, True)
    assert type(model.backbone).__module__.startswith('mmvitreg')
    assert type(baseline.backbone).__module__.startswith('mmpretrain')
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in baseline.parameters())


def _leaves(node, path=()):
    """``(path, value)`` of every leaf of a config dict (lists of dicts entered, other lists as one leaf)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, path + (key, ))
    elif isinstance(node, (list, tuple)) and any(isinstance(v, dict) for v in node):
        for i, value in enumerate(node):
            yield from _leaves(value, path + (i, ))
    else:
        yield path, node


@pytest.mark.parametrize('name', sorted(bench.CASES))
def test_tiny_variant_is_the_case_with_smaller_sizes(name):
    """Each side's tiny config differs from its full-size config in sizes only, and the tiny model is built of
    the components the full config names: classifier, backbone, neck, head, target transform, auxiliary losses
    and token mix (so the smoke test runs the techniques and settings the measurement compares)."""
    from mmengine.registry import MODELS
    case = bench.get_case(name)
    for role in bench.ROLES:
        full, tiny = case.load(role, 224, False), case.load(role, 32, True)
        big, small = dict(_leaves(full.model.to_dict())), dict(_leaves(tiny.model.to_dict()))
        changed = [p for p in big.keys() | small.keys() if big.get(p, KeyError) != small.get(p, KeyError)]
        assert changed and all(p[-1] in SIZE_KEYS for p in changed), (role, changed)
        model = case.build(role, 32, True)
        built = dict(model=model, backbone=model.backbone, neck=getattr(model, 'neck', None),
                     head=getattr(model, 'head', None), decode_head=getattr(model, 'decode_head', None),
                     auxiliary_head=getattr(model, 'auxiliary_head', None),
                     target_transform=getattr(model, 'target_transform', None),
                     token_mix=getattr(model.data_preprocessor, 'token_mix', None))
        with MODELS.switch_scope_and_registry(full.default_scope) as registry:
            for part, cfg in dict(full.model, model=full.model).items():
                if part in built:
                    expected = registry.get(cfg['type']) if cfg else type(None)
                    assert type(built[part]) is expected, (role, part)
            assert [type(m) for m in getattr(model, 'aux_losses', [])] == [
                registry.get(c['type']) for c in full.model.get('aux_losses', [])], role
            token_mix = (full.model.get('train_cfg') or {}).get('token_mix')
            assert type(built['token_mix']) is (registry.get(token_mix['type']) if token_mix else type(None)), role


@pytest.mark.parametrize('name', sorted(n for n, c in bench.CASES.items() if not c.model and not c.both))
def test_model_under_test_is_the_config_itself(name):
    """A case whose model has no overrides measures the config's model exactly (its arch preset named by the
    dict it stands for)."""
    from mmengine.config import Config
    case = bench.get_case(name)
    cfg = Config.fromfile(bench.ROOT / 'configs' / case.config)
    bench._arch_preset_as_dict(cfg)
    assert case.load('model', cfg.model.backbone.img_size, False).model.to_dict() == cfg.model.to_dict()


def test_registry_and_verdict():
    with pytest.raises(KeyError, match='known cases'):
        bench.get_case('no-such-case')
    case = bench.get_case('deepvit-s-vs-msa')
    with pytest.raises(KeyError, match='exists already'):
        bench.register_case('deepvit-s-vs-msa', case)
    memory = dict(model=2, baseline=1)
    assert bench.CaseResult('x', case, dict(model=1.10, baseline=1.0), memory).passed
    assert not bench.CaseResult('x', case, dict(model=1.11, baseline=1.0), memory).passed
    assert 'FAIL' in bench.CaseResult('x', case, dict(model=1.2, baseline=1.0), memory).report()


def test_data_pipeline_benchmark_compares_store_and_files(tmp_path):
    """benchmark_data_pipeline.py times the plain pipeline against both label-map sources on the same
    samples and stops if the packed store and the .pt files give different token labels."""
    proc = run_tool(['analysis_tools/benchmark_data_pipeline.py', '--num-images', 6, '--rounds', 1,
                     '--batch-size', 8, '--work-dir', tmp_path], cwd=tmp_path)
    out = proc.stdout
    for name in ('without label maps', 'label maps, packed store', 'label maps, .pt files'):
        assert re.search(rf'^  {re.escape(name)}: \d+\.\d+ ms/image$', out, flags=re.M)
    verdicts = re.findall(r'^label maps, (packed store|\.pt files): the data pipeline is -?\d+\.\d+% slower', out,
                          flags=re.M)
    assert verdicts == ['packed store', '.pt files']
    assert 'token labels from the store and from the .pt files: identical' in out
    assert (tmp_path / 'labels_packed' / 'packed.json').is_file()
