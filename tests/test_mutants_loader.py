"""Behaviours of the loader (``mmvitreg/engine/checkpoint.py``, ``mmvitreg/fileio.py``) that the mutation run
(``tools/misc/mutation_score.py``, docs/mutation.md) found untested: the HistoryBuffer ``getattr`` allow-list, the
errors a module reports while loading, what a refused file looks like, the EMA copy check, the backbone policy's
share and ``--resume auto``'s candidates. Tiny ``nn.Linear`` models, files in ``tmp_path``; no training."""

import os
import pickle
from collections import defaultdict

import pytest
import torch
from checkpoint_converter import convert_checkpoint_file, converter_cli
from mmengine.logging import HistoryBuffer
from torch import nn

from mmvitreg.engine.checkpoint import (
    ATOMIC_BACKEND,
    AtomicLocalBackend,
    CheckpointError,
    KeyReport,
    Pretrained,
    _looks_like,
    compare_copy,
    fill_model,
    fit,
    judge,
    load_weights,
    partial_loading,
)
from mmvitreg.engine.runner import first_readable, resume_candidates
from mmvitreg.fileio import UnsafeCheckpointError, _history_buffer_statistic, atomic_write, load_checkpoint
from mmvitreg.models.converters import convert_checkpoint


class Net(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.backbone = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, classes)


# ---------------------------------------------------------------- fileio


def test_getattr_is_allowed_for_a_history_buffer_statistic_and_nothing_else():
    """A HistoryBuffer pickle names getattr(HistoryBuffer, 'min'); any other attribute, or any other class, is
    refused (both conditions are needed: getattr(HistoryBuffer, 'update') or getattr(dict, 'min') would hand the
    pickle a callable it has no business with)."""
    assert _history_buffer_statistic(HistoryBuffer, 'min') is HistoryBuffer.min
    assert _history_buffer_statistic(HistoryBuffer, 'mean') is HistoryBuffer.mean
    for owner, name in ((HistoryBuffer, 'update'), (HistoryBuffer, '__init__'), (dict, 'min'), (HistoryBuffer, 'x')):
        with pytest.raises(pickle.UnpicklingError, match='is not a HistoryBuffer statistic'):
            _history_buffer_statistic(owner, name)


def test_what_mmengine_and_numpy_put_in_a_checkpoint_loads_through_the_allow_list(tmp_path):
    """The allow-list holds numpy's array and scalar rebuild functions and dtypes (a HistoryBuffer's history, a
    numpy RNG state, numpy scalars in meta) and argparse.Namespace (timm-era official checkpoints' args)."""
    import argparse

    import numpy as np

    buffer = HistoryBuffer()
    buffer.update(0.5)
    buffer.update(1.5)
    saved = {
        'state_dict': {'w': torch.ones(1)},
        'history': buffer,
        'rng': np.random.RandomState(0).get_state(),
        'eta': np.float64(2.5),
        'steps': np.arange(3, dtype=np.int16),
        'args': argparse.Namespace(lr=0.1),
    }
    torch.save(saved, tmp_path / 'ckpt.pth')
    loaded = load_checkpoint(str(tmp_path / 'ckpt.pth'), unsafe=False)
    assert loaded['history'].mean() == 1.0 and loaded['history'].min() == 0.5
    assert loaded['eta'] == 2.5 and loaded['steps'].dtype == np.int16 and loaded['steps'].tolist() == [0, 1, 2]
    assert (loaded['rng'][1] == saved['rng'][1]).all() and loaded['args'].lr == 0.1


def test_an_object_array_is_refused_by_the_allow_list(tmp_path):
    """numpy's object dtype (and void) is left out of the allow-list: an object array unpickles arbitrary objects."""
    import numpy as np

    torch.save({'state_dict': {'w': torch.ones(1)}, 'a': np.array([1, 'x'], dtype=object)}, tmp_path / 'obj.pth')
    with pytest.raises(UnsafeCheckpointError, match='obj.pth: refused to unpickle'):
        load_checkpoint(str(tmp_path / 'obj.pth'), unsafe=False)


def test_a_failed_atomic_write_removes_its_temporary_keeps_the_old_file_and_raises(tmp_path):
    target = tmp_path / 'last_checkpoint'
    atomic_write(str(target), lambda f: f.write(b'old'))

    def fail(f):
        f.write(b'half')
        raise OSError('disk full')

    with pytest.raises(OSError, match='disk full'):
        atomic_write(str(target), fail)
    assert target.read_bytes() == b'old' and os.listdir(tmp_path) == ['last_checkpoint']


def test_the_atomic_backend_is_registered_with_mmengine():
    """A config's backend_args=dict(backend='mmvitreg_atomic_local') builds the atomic backend."""
    from mmengine.fileio import get_file_backend

    assert isinstance(get_file_backend(backend_args=dict(backend=ATOMIC_BACKEND)), AtomicLocalBackend)


# ---------------------------------------------------------------- the key report


class Refusing(nn.Linear):
    """A module that reports an error while loading (as a module with its own ``_load_from_state_dict`` may)."""

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, error_msgs)
        error_msgs.append('the kernel is stored transposed')


def test_a_modules_own_load_error_is_reported_and_mmengines_key_lines_are_not():
    """mmengine logs its missing / unexpected key lists in the same message as the modules' errors: the report keeps
    the key lists apart and only the other lines as errors."""
    source = Net().state_dict()
    source['extra.weight'] = torch.zeros(1)
    del source['head.bias']
    report = fit(Net(), source)
    assert report.missing == ['head.bias'] and report.unexpected == ['extra.weight'] and report.errors == []
    model = Net()
    model.head = Refusing(8, 3)
    report = fit(model, Net().state_dict())
    assert report.errors == ['the kernel is stored transposed'] and not report.clean
    assert report.missing == [] and report.unexpected == [] and report.mismatched == {} == report.resized
    assert 'error: the kernel is stored transposed' in report.describe()
    with pytest.raises(CheckpointError, match='does not fit the model Net .*error: the kernel'):
        judge(model, report, {}, 'f.pth', 'strict', 'hint')
    with pytest.raises(CheckpointError, match='does not load into the model Net: the kernel is stored transposed'):
        judge(model, report, {}, 'f.pth', 'backbone', 'hint')  # an error is no filled tensor
    judge(model, report, {}, 'f.pth', 'partial', 'hint')


def test_a_report_lists_the_first_five_keys_of_each_kind_and_counts_the_rest():
    five = [f'k{i}' for i in range(5)]
    assert KeyReport(missing=five).describe() == (
        '0 matched, 0 resized, 5 missing, 0 unexpected, 0 mismatched keys; missing: k0, k1, k2, k3, k4'
    )
    assert KeyReport(unexpected=five + ['k5', 'k6']).describe().endswith('unexpected: k0, k1, k2, k3, k4, ... (2 more)')


def test_judge_refuses_an_unknown_policy():
    with pytest.raises(ValueError, match=r"a load policy is one of \('strict', 'backbone', 'partial'\), not 'lenient'"):
        judge(Net(), KeyReport(), {}, 'f.pth', 'lenient', 'hint')


# ---------------------------------------------------------------- what a file looks like


def test_a_refused_file_is_described_by_its_layout_its_top_level_modules_or_its_first_keys():
    meta = {'official_layout': 'DeepViT', 'official_model': 'deepvit-s'}
    assert _looks_like({'meta': meta}, {}) == 'the DeepViT release layout, converted on load for deepvit-s'
    assert _looks_like({}, {'backbone.a': 0, 'head.b': 0, 'neck.c': 0}) == (
        'a checkpoint of another model (top-level modules: backbone, head, neck)'
    )
    assert _looks_like({'meta': None}, {'blocks.0.w': 0, 'cls_token': 0}) == (
        'a state dict of no known layout (first keys: blocks.0.w, cls_token)'
    )


# ---------------------------------------------------------------- the backbone policy


def test_the_backbone_policy_needs_ninety_percent_of_the_backbone_and_no_dropped_parameter():
    """The backbone policy: at least MIN_BACKBONE_SHARE (0.9) of the backbone's tensors filled (missing or mismatched
    ones are not), counted on model.backbone's keys when there is one; an unexpected backbone parameter stops the
    load, one outside the backbone (a head the model does not have) does not."""
    model = Net()
    clean = fit(model, Net().state_dict())
    judge(model, clean, {}, 'f.pth', 'backbone', 'hint')
    head_only = fit(model, {k: v for k, v in Net(7).state_dict().items() if 'backbone' in k})
    judge(model, head_only, {}, 'f.pth', 'backbone', 'hint')  # the head may be missing or resized: backbone is full
    half = fit(model, {'backbone.weight': torch.zeros(8, 4)})
    with pytest.raises(CheckpointError, match=r'would fill 1 of the 2 backbone tensors \(at least 90% needed'):
        judge(model, half, {}, 'f.pth', 'backbone', 'hint')
    extra = fit(model, {**Net().state_dict(), 'backbone.proj_pre.weight': torch.zeros(1)})
    with pytest.raises(CheckpointError, match=r'has 1 parameters the model Net has no place for \(backbone.proj_pre'):
        judge(model, extra, {}, 'f.pth', 'backbone', 'hint')
    other_head = fit(model, {**Net().state_dict(), 'head.pre_logits.weight': torch.zeros(1)})
    assert other_head.unexpected == ['head.pre_logits.weight']
    judge(model, other_head, {}, 'f.pth', 'backbone', 'hint')


class LeftOut(nn.Linear):
    """A backbone whose options left its output norm ``norm`` out."""

    left_out = ('norm',)


def test_the_backbone_policy_accepts_the_keys_of_the_modules_the_backbone_leaves_out_and_no_other():
    """The backbone policy: a checkpoint's keys under a module of the backbone's ``left_out`` are accepted, in a
    backbone loaded alone (init_cfg) and under ``backbone.`` in a model; a key of another module (also one whose
    name starts with the left-out one's) is still refused."""
    weights = LeftOut(4, 8).state_dict()
    alone = LeftOut(4, 8)
    judge(alone, fit(alone, {**weights, 'norm.weight': torch.ones(8)}), {}, 'f.pth', 'backbone', 'hint')
    model = Net()
    model.backbone = LeftOut(4, 8)
    state = {**Net().state_dict(), 'backbone.norm.weight': torch.ones(8), 'backbone.norm.bias': torch.ones(8)}
    judge(model, fit(model, state), {}, 'f.pth', 'backbone', 'hint')
    for key in ('norm_pre.weight', 'proj.weight'):
        with pytest.raises(CheckpointError, match=rf'has 1 parameters the model LeftOut has no place for \({key}\)'):
            judge(alone, fit(alone, {**weights, key: torch.ones(8)}), {}, 'f.pth', 'backbone', 'hint')


# ---------------------------------------------------------------- the EMA copy check


def test_the_ema_copy_check_matches_each_tensor_in_the_state_dict_or_the_ema_state_dict():
    """compare_copy: a tensor equal to the same key in state_dict or ema_state_dict (module. dropped) is matched, one
    whose key has another shape in every source mismatched, any other missing; derived buffers are skipped."""
    copy = Net()
    state = {k: v.clone() for k, v in copy.state_dict().items()}
    checkpoint = {
        'state_dict': {**state, 'backbone.weight': state['backbone.weight'] + 1, 'head.bias': torch.zeros(5)},
        'ema_state_dict': {'module.backbone.weight': state['backbone.weight']},
    }
    del checkpoint['state_dict']['bn.num_batches_tracked']
    report = compare_copy(copy, checkpoint)
    assert 'backbone.weight' in report.matched and 'bn.num_batches_tracked' not in report.matched + report.missing
    assert report.mismatched == {'head.bias': ((5,), (3,))} and report.missing == []
    no_ema = {'state_dict': checkpoint['state_dict'], 'ema_state_dict': None}
    report = compare_copy(copy, no_ema)
    assert report.missing == ['backbone.weight'] and 'backbone.bias' in report.matched
    with pytest.raises(CheckpointError, match="does not fit EMAHook's EMA copy of Net .*missing: backbone.weight"):
        judge(copy, report, no_ema, 'f.pth', 'strict', 'hint', "EMAHook's EMA copy of")


# ---------------------------------------------------------------- --resume auto


def test_resume_candidates_put_the_file_last_checkpoint_names_first_once(tmp_path):
    for name in ('epoch_2.pth', 'iter_30.pth', 'epoch_10.pth', 'best_epoch_3.pth'):
        (tmp_path / name).write_bytes(b'x')
    other = str(tmp_path / 'elsewhere' / 'best.pth')
    (tmp_path / 'last_checkpoint').write_text(other + '\n')
    assert resume_candidates(str(tmp_path)) == [other] + [
        str(tmp_path / n) for n in ('iter_30.pth', 'epoch_10.pth', 'epoch_2.pth')
    ]
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'sub' / '..' / 'epoch_10.pth'))
    assert [os.path.basename(p) for p in resume_candidates(str(tmp_path))] == [
        'epoch_10.pth',
        'iter_30.pth',
        'epoch_2.pth',
    ]  # the same file named another way is listed once
    (tmp_path / 'last_checkpoint').write_text('  \n')
    assert [os.path.basename(p) for p in resume_candidates(str(tmp_path))] == [
        'iter_30.pth',
        'epoch_10.pth',
        'epoch_2.pth',
    ]
    assert resume_candidates(str(tmp_path / 'missing')) == []


def test_first_readable_skips_unreadable_candidates_with_a_warning_and_fails_when_none_reads(tmp_path):
    good, bad = tmp_path / 'epoch_1.pth', tmp_path / 'epoch_2.pth'
    torch.save({'state_dict': {'w': torch.ones(1)}}, good)
    bad.write_bytes(b'')
    warned = []
    assert first_readable([str(bad), str(good)], warned.append) == str(good)
    assert len(warned) == 1 and f'skipping {bad}' in warned[0]
    assert first_readable([], warned.append) is None
    with pytest.raises(
        CheckpointError,
        match=r'no readable checkpoint to resume from: checkpoint .*epoch_2.pth '
        r'is an empty file .* \| checkpoint .*missing.pth does not exist',
    ):
        first_readable([str(bad), str(tmp_path / 'missing.pth')], warned.append)


# ---------------------------------------------------------------- init_cfg and the converters


def test_pretrained_records_the_load_in_mmengines_init_info(tmp_path):
    """mmengine logs, per parameter, what initialised it: a Pretrained load updates the entries of the parameters it
    changed (a module without the record, a backbone built alone, loads as well)."""
    path = tmp_path / 'net.pth'
    torch.save({'state_dict': {k: v + 1 if v.is_floating_point() else v for k, v in Net().state_dict().items()}}, path)
    model = Net()
    model._params_init_info = defaultdict(dict)
    for param in model.parameters():
        model._params_init_info[param].update(init_info='before', tmp_mean_value=param.data.mean())
    Pretrained(checkpoint=str(path))(model)
    assert {v['init_info'] for v in model._params_init_info.values()} == {f'Pretrained: load from {path}'}
    plain = Net()
    Pretrained(checkpoint=str(path))(plain)
    assert not hasattr(plain, '_params_init_info')
    assert torch.equal(plain.head.bias, torch.load(path)['state_dict']['head.bias'])


def test_a_converter_takes_the_trained_weights_unless_ema_and_reports_what_it_saved(tmp_path, capsys):
    src, dst = tmp_path / 'official.pth', tmp_path / 'converted.pth'
    torch.save({'model': {'w': torch.zeros(2)}, 'model_ema': {'w': torch.ones(2)}}, src)
    assert torch.equal(convert_checkpoint_file(str(src), str(dst), dict)['w'], torch.zeros(2))
    assert torch.equal(convert_checkpoint_file(str(src), str(dst), dict, ema=True)['w'], torch.ones(2))
    converter_cli(dict, 'Convert.\nMore.', [str(src), str(dst)])
    assert capsys.readouterr().out == f'saved 1 tensors to {dst}\n'
    assert torch.equal(torch.load(dst)['state_dict']['w'], torch.zeros(2))


# ---------------------------------------------------------------- step 2: revise, detect and convert


def test_a_release_is_converted_with_one_log_line_and_a_file_that_does_not_convert_names_its_layout(caplog):
    import logging

    from test_official_checkpoint_loading import LAYOUTS

    release = LAYOUTS['deit'][0]()
    caplog.set_level(logging.INFO, logger='test_mutants_loader')
    converted = convert_checkpoint({'model': release}, 'deit.pth', logger=logging.getLogger('test_mutants_loader'))
    lines = [r.getMessage() for r in caplog.records if r.name == 'test_mutants_loader']
    assert (
        converted['meta']['official_layout'].startswith('timm / DeiT ViT')
        and 'backbone.cls_token' in converted['state_dict']
    )
    assert (
        len(lines) == 1
        and lines[0].startswith('checkpoint deit.pth: timm / DeiT ViT')
        and 'converted on load by' in lines[0]
    )
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint f.pth looks like the timm / DeiT ViT .* release layout but "
        r"does not convert: keys with no mmvitreg counterpart: \['blocks.0.x'\]",
    ):
        convert_checkpoint({'model': {**release, 'blocks.0.x': torch.zeros(1)}}, 'f.pth')
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint f.pth: no state dict found in the checkpoint .* top-level "
        r"keys: \['epoch', 'meta'\]",
    ):
        convert_checkpoint({'meta': {}, 'epoch': 3}, 'f.pth')


# ---------------------------------------------------------------- the whole pass: prefix, log line, opt-outs


class Wide(nn.Module):
    """A model whose backbone has ten tensors."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.ModuleList(nn.Linear(2, 2) for _ in range(5))


def test_the_backbone_policy_accepts_exactly_ninety_percent():
    """MIN_BACKBONE_SHARE is a lower bound: 9 of 10 backbone tensors filled pass, 8 do not."""
    full = Wide().state_dict()
    nine = {k: v for k, v in full.items() if k != 'backbone.4.bias'}
    judge(Wide(), fit(Wide(), nine), {}, 'f.pth', 'backbone', 'hint')
    eight = {k: v for k, v in nine.items() if k != 'backbone.4.weight'}
    with pytest.raises(CheckpointError, match='would fill 8 of the 10 backbone tensors'):
        judge(Wide(), fit(Wide(), eight), {}, 'f.pth', 'backbone', 'hint')


def test_load_weights_selects_the_prefix_logs_one_line_and_refuses_a_prefix_with_no_key(tmp_path, caplog):
    import logging

    path = tmp_path / 'classifier.pth'
    source = Net()
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in source.backbone.state_dict().items()}}, path)
    target = nn.Linear(4, 8)
    caplog.set_level(logging.INFO, logger='test_mutants_loader')
    report = load_weights(target, str(path), prefix='backbone', logger=logging.getLogger('test_mutants_loader'))
    assert report.clean and torch.equal(target.weight, source.backbone.weight)
    assert [r.getMessage() for r in caplog.records if r.name == 'test_mutants_loader'] == [
        f"weights (prefix='backbone.') {path}: 2 matched, 0 resized, 0 missing, 0 unexpected, 0 mismatched keys"
    ]
    with pytest.raises(
        CheckpointError,
        match=r"has no key under the prefix='neck.'; the file looks like a checkpoint "
        r'of another model \(top-level modules: backbone\); use a checkpoint',
    ):
        load_weights(target, str(path), prefix='neck.')


def test_partial_loading_is_the_opt_out_only_inside_its_block():
    checkpoint = {'state_dict': {k: v for k, v in Net().state_dict().items() if not k.startswith('head.')}}
    with partial_loading():
        fill_model(Net(), dict(checkpoint))
    with pytest.raises(CheckpointError, match='does not fit the model Net .*missing: head.weight, head.bias'):
        fill_model(Net(), dict(checkpoint))


def test_a_converter_refuses_a_refused_global_by_default_and_names_keys_it_does_not_know(tmp_path):
    import numpy as np

    src, dst = tmp_path / 'official.pth', tmp_path / 'converted.pth'
    torch.save({'model': {'w': torch.zeros(2)}, 'a': np.array([1, 'x'], dtype=object)}, src)
    with pytest.raises(CheckpointError, match='official.pth: refused to unpickle'):
        convert_checkpoint_file(str(src), str(dst), dict)
    assert torch.equal(convert_checkpoint_file(str(src), str(dst), dict, unsafe_load=True)['w'], torch.zeros(2))

    def convert(state_dict):
        raise KeyError("keys with no mmvitreg counterpart: ['w']")

    with pytest.raises(CheckpointError, match=r"official.pth does not convert: keys with no mmvitreg counterpart"):
        convert_checkpoint_file(str(src), str(dst), convert, unsafe_load=True)
