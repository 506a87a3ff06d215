"""tools/analysis_tools/benchmark_train_step.py: the cases run side by side and report their ratios;
the case registry and the verdict behave as documented (no timing is asserted)."""

import os
import re
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, run_tool
from mmengine.model import BaseModel
from studies import train_step_benchmark as bench
from torch import nn

# the keys a tiny variant may change: sizes (widths, depths, heads, windows, grids, image size, pairs drawn),
# and the per-block attention kinds of a shortened arch
SIZE_KEYS = {
    'embed_dims',
    'num_layers',
    'num_heads',
    'feedforward_channels',
    'depths',
    'channels',
    'in_channels',
    'window_size',
    'out_indices',
    'img_size',
    'patch_size',
    'grid_pool',
    'num_pairs',
    'attn_types',
    'size',
}  # a segmentor's data_preprocessor.size: the crop its batches are padded to


ROW = r'^(model|baseline) +(\d+\.\d) +(\d+\.\d) +(\d+\.\d{4}|n/a) +(\d+\.\d\d) +(\d+\.\d\d)$'


def test_tool_runs_every_case_with_tiny_models(tmp_path):
    proc = run_tool(
        [
            'analysis_tools/benchmark_train_step.py',
            '--tiny',
            '--repeats',
            1,
            '--warmup',
            0,
            '--batch-size',
            2,
            '--img-size',
            32,
            '--threads',
            1,
            '--clock',
            'cpu',
        ],
        cwd=tmp_path,
        timeout=1500,
    )
    out = proc.stdout
    for name, case in bench.CASES.items():
        assert f'== {name}: {case.description}\nconfig {case.recipe()}\n' in out
    ratios = re.findall(r'time ratio (\d+\.\d+) \(target <= (\d+\.\d+)\): not judged;  memory ratio (\d+\.\d+)', out)
    assert len(ratios) == len(bench.CASES)
    assert all(float(t) > 0 and float(m) > 0 for t, _, m in ratios)
    assert {float(target) for _, target, _ in ratios} == {round(c.max_time_ratio, 3) for c in bench.CASES.values()}
    rows = re.findall(ROW, out, flags=re.M)
    assert len(rows) == 2 * len(bench.CASES)
    assert all(
        float(ms) > 0 and float(ips) > 0 and float(gib) > 0 and float(gflop) > 0 and float(tflops) >= 0
        for _, ms, ips, gib, gflop, tflops in rows
    )
    summary = out[out.index('\nsummary\n') :].splitlines()[2:]
    assert summary[:2] == bench.SUMMARY_HEADER.splitlines()
    assert [row.split(' | ')[0] for row in summary[2:]] == [f'| {name}' for name in sorted(bench.CASES)]


def test_spawned_memory_processes_and_bf16_on_the_cpu(tmp_path):
    """The start CUDA needs (spawn), forced on the CPU, with bf16 autocast: peaks are measured, and a case that fixes
    its sides' precision keeps it."""
    proc = run_tool(
        [
            'analysis_tools/benchmark_train_step.py',
            '--tiny',
            '--repeats',
            1,
            '--warmup',
            0,
            '--batch-size',
            2,
            '--img-size',
            32,
            '--threads',
            1,
            '--amp',
            'bf16',
            '--memory',
            'spawn',
            '--case',
            'deit-s-vs-timm',
            'deit-s-tlalign-bf16-vs-fp32',
        ],
        cwd=tmp_path,
    )
    assert 'batch 2, 32x32 images, bf16,' in proc.stdout
    rows = re.findall(ROW, proc.stdout, flags=re.M)
    assert len(rows) == 4 and all(float(gib) > 0 for _, _, _, gib, _, _ in rows)
    assert "baseline: the config in fp32" in proc.stdout


def test_memory_pass_can_be_left_out():
    res = bench.run_case(
        'deepvit-s-vs-msa', batch_size=2, img_size=32, repeats=1, warmup=0, device='cpu', tiny=True, memory=False
    )
    assert res.memory is None and res.flops['model'] > 0 and res.batch_size == 2
    assert 'memory ratio not measured' in res.report() and len(re.findall(ROW, res.report(), flags=re.M)) == 2
    assert ' | n/a | ' in res.row()


def test_fp16_on_a_cpu_and_a_timm_case_without_timm_fail_with_one_line_naming_the_fix(tmp_path):
    tool = ['analysis_tools/benchmark_train_step.py', '--tiny', '--case', 'deit-s-vs-timm']
    proc = run_tool(tool + ['--amp', 'fp16'], cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(
        '--amp fp16 needs a GPU (float16 autocast with a loss scale); on a CPU use --amp bf16'
    )
    hidden = tmp_path / 'no_timm'
    hidden.mkdir()
    (hidden / 'timm.py').write_text("raise ImportError(\"No module named 'timm'\")\n")
    env = {'PYTHONPATH': f'{hidden}{os.pathsep}{REPO}'}
    proc = run_tool(tool, cwd=tmp_path, check=False, env=env)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(
        'the timm cases need timm (an optional benchmark requirement): pip install -r requirements/bench.txt'
    )
    listed = run_tool(['analysis_tools/benchmark_train_step.py', '--list'], cwd=tmp_path, env=env).stdout
    assert [ln.split(':')[0] for ln in listed.splitlines()] == sorted(bench.CASES)  # listing needs no timm


class TwoLinears(BaseModel):
    """x (B, 6) -> Linear(6, 5) -> Linear(5, 3) -> sum: a model whose training FLOPs are counted by hand."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(6, 5), nn.Linear(5, 3)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        out = self.second(self.first(inputs))
        return dict(loss=out.sum()) if mode == 'loss' else out


def test_flop_count_matches_a_hand_count():
    """2 FLOPs per multiply-add. Forward: 2*B*(6*5 + 5*3). Backward: the second layer's input and weight gradients
    (2 * 2*B*5*3); the first layer's weight gradient only (its input needs none): 2*B*6*5."""
    batch = 4
    flops = bench.train_step_flops(TwoLinears(), dict(inputs=torch.randn(batch, 6)))
    assert flops == 2 * batch * (6 * 5 + 5 * 3) + 2 * (2 * batch * 5 * 3) + 2 * batch * 6 * 5


def test_op_count_splits_forward_and_backward():
    """The forward + loss dispatches both layers' ``addmm`` (no matrix product of a gradient); the backward the
    products of the gradients, by hand: the second layer's input and weight gradients, the first layer's weight
    gradient only (its input needs none), 3 ``mm``; the gradients are cleared."""
    model = TwoLinears()
    ops = bench.train_step_ops(model, dict(inputs=torch.randn(4, 6)))
    assert set(ops) == set(bench.PASSES)
    assert ops['forward']['addmm'] == 2 and ops['forward']['mm'] == 0
    assert ops['backward']['mm'] == 3 and ops['backward']['addmm'] == 0
    assert all(p.grad is None for p in model.parameters())


def test_counted_ops_are_reported_and_judged():
    """``count_ops``: each side's forward / backward operators, the operators the model adds and the ratio the
    case's target measures (re-attention: the forward) in the report and the summary row."""
    res = bench.run_case(
        'deepvit-s-vs-msa',
        batch_size=2,
        img_size=32,
        repeats=1,
        warmup=0,
        device='cpu',
        tiny=True,
        memory=False,
        count_ops=True,
    )
    forward = {role: res.op_count(role, ('forward',)) for role in bench.ROLES}
    assert forward['model'] > forward['baseline'] > 0 and res.op_count('baseline') > forward['baseline']
    assert res.op_ratio == forward['model'] / forward['baseline']
    report = res.report(judge=False)
    assert f'aten ops per step (forward + loss / backward): model {forward["model"]} / ' in report
    assert f'op ratio {res.op_ratio:.3f} (target <= 1.100 fwd)' in report
    assert re.search(r'^  forward ops, model - baseline: \w+ \+\d+', report, flags=re.M)
    assert f'| {res.op_ratio:.3f} (<= 1.100 fwd) | not judged |' in res.row(judge=False)


class Attention(BaseModel):
    """x (B, L, 8) -> Linear(8, 8) as q = k = v of 2 heads of 4 channels -> fused attention -> sum."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 8)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        x = self.qkv(inputs).unflatten(-1, (2, 4)).transpose(1, 2)
        return dict(loss=F.scaled_dot_product_attention(x, x, x).sum())


def test_fused_attention_is_counted_on_a_cpu_too():
    """The fused kernel (CPU flash attention here): forward q k^T and attn v, 2 * 2*B*H*L*L*D; backward 2.5 times
    that (the scores recomputed, then four products); the linear layer's forward and weight gradient."""
    b, length, heads, dim = 3, 10, 2, 4
    flops = bench.train_step_flops(Attention(), dict(inputs=torch.randn(b, length, 8)))
    attention = 2 * 2 * b * heads * length * length * dim
    assert flops == attention + 5 * attention // 2 + 2 * (2 * b * length * 8 * 8)


def test_optim_wrapper_of_each_precision_on_a_cpu():
    from mmengine.optim import OptimWrapper

    from mmvitreg.engine import AutocastOptimWrapper

    model = nn.Linear(2, 2)
    assert type(bench.build_optim_wrapper(model, 'cpu')) is OptimWrapper
    wrapper = bench.build_optim_wrapper(model, 'cpu', 'bf16')
    assert type(wrapper) is AutocastOptimWrapper and wrapper.cast_dtype == torch.bfloat16
    assert type(wrapper.optimizer) is torch.optim.AdamW and wrapper.optimizer.defaults['weight_decay'] == 0.05
    with pytest.raises(ValueError, match='fp16 autocast needs a GPU'):
        bench.build_optim_wrapper(model, 'cpu', 'fp16')


def test_compile_flag_compiles_both_sides_loss_and_counts_flops_eagerly():
    case = bench.get_case('deepvit-s-vs-msa')
    compiled = {
        role: bench.prepare(case, role, img_size=32, batch_size=2, device='cpu', tiny=True, compile=True)
        for role in bench.ROLES
    }
    assert all(hasattr(side.model.loss, '_torchdynamo_orig_callable') for side in compiled.values())
    eager = bench.prepare(case, 'model', img_size=32, batch_size=2, device='cpu', tiny=True)
    assert not hasattr(eager.model.loss, '_torchdynamo_orig_callable')
    assert eager.flops == compiled['model'].flops > 0


@pytest.mark.parametrize('name', ['deit-s-vs-timm', 'swin-t-vs-timm'])
def test_timm_cases_time_timms_own_model_with_our_numbers(name):
    """Our side is mmvitreg's model with the techniques and mixing off, timm's side timm's own model; at tiny and at
    full size both have the same number of parameters (the same architecture)."""
    import timm

    case = bench.get_case(name)
    for tiny, img_size in ((False, 224), (True, 32)):
        ours, theirs = case.build('model', img_size, tiny), case.build('baseline', img_size, tiny)
        assert type(ours.backbone).__module__.startswith('mmvitreg') and ours.target_transform is None
        assert getattr(ours.data_preprocessor, 'mix', None) is None
        assert isinstance(theirs, bench.TimmClassifier) and type(theirs.timm_model).__module__.startswith('timm')
        assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert timm.__version__.startswith('1.')
    data = case.make_batch(2, 32)
    losses = theirs.train_step(data, bench.build_optim_wrapper(theirs, 'cpu'))
    assert set(losses) == {'loss'} and float(losses['loss'].detach()) > 0


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
            yield from _leaves(value, path + (key,))
    elif isinstance(node, (list, tuple)) and any(isinstance(v, dict) for v in node):
        for i, value in enumerate(node):
            yield from _leaves(value, path + (i,))
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
        if isinstance(full.model.type, type):  # another library's model (timm's): built as the config names it
            assert type(model) is full.model.type
            continue
        built = dict(
            model=model,
            backbone=model.backbone,
            neck=getattr(model, 'neck', None),
            head=getattr(model, 'head', None),
            decode_head=getattr(model, 'decode_head', None),
            auxiliary_head=getattr(model, 'auxiliary_head', None),
            target_transform=getattr(model, 'target_transform', None),
            mix=getattr(model.data_preprocessor, 'mix', None),
        )
        with MODELS.switch_scope_and_registry(full.default_scope) as registry:
            for part, cfg in dict(full.model, model=full.model).items():
                if part in built:
                    expected = registry.get(cfg['type']) if cfg else type(None)
                    assert type(built[part]) is expected, (role, part)
            assert [type(m) for m in getattr(model, 'aux_losses', [])] == [
                registry.get(c['type']) for c in full.model.get('aux_losses', [])
            ], role
            mix = (full.model.get('train_cfg') or {}).get('mix')
            assert type(built['mix']) is (registry.get(mix['type']) if mix else type(None)), role


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

    def ops(model_forward):  # re-attention's target: its forward <= 1.10x MSA's (the backward not judged)
        return {
            'model': dict(forward=Counter(mm=model_forward), backward=Counter(mm=500)),
            'baseline': dict(forward=Counter(mm=100), backward=Counter(mm=100)),
        }

    assert case.op_target == ('forward', 1.10)
    assert bench.CaseResult('x', case, dict(model=1.0, baseline=1.0), memory, ops=ops(110)).passed
    assert not bench.CaseResult('x', case, dict(model=1.0, baseline=1.0), memory, ops=ops(111)).passed
    timm_case = bench.get_case('deit-s-vs-timm')  # techniques off: the whole step <= 1.03x timm's
    assert timm_case.op_target == ('step', 1.03)
    assert bench.CaseResult('x', timm_case, dict(model=1.0, baseline=1.0), memory, ops=ops(100)).op_ratio == 3.0


def test_data_pipeline_benchmark_compares_store_and_files(tmp_path):
    """benchmark_data_pipeline.py times the plain pipeline against the three label-map sources on the same
    samples and stops if the packed store, the .npy and the .pt files give different token labels."""
    proc = run_tool(
        [
            'analysis_tools/benchmark_data_pipeline.py',
            '--num-images',
            6,
            '--rounds',
            1,
            '--batch-size',
            8,
            '--work-dir',
            tmp_path,
        ],
        cwd=tmp_path,
    )
    out = proc.stdout
    for name in ('without label maps', 'label maps, packed store', 'label maps, .npy files', 'label maps, .pt files'):
        assert re.search(rf'^  {re.escape(name)}: \d+\.\d+ ms/image$', out, flags=re.M)
    verdicts = re.findall(
        r'^label maps, (packed store|\.npy files|\.pt files): the data pipeline is -?\d+\.\d+% '
        'slower',
        out,
        flags=re.M,
    )
    assert verdicts == ['packed store', '.npy files', '.pt files']
    assert 'token labels from the store, the .npy and the .pt files: identical' in out
    assert (tmp_path / 'labels_packed' / 'packed.json').is_file()
