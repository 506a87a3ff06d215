"""Issue 47 items 1 and 8 (checkpoints): a checkpoint from a stranger never crashes, hangs or corrupts the process
that reads it. ``import mmvitreg`` leaves torch's ``weights_only`` allow-list as it was (what any other
``torch.load`` accepts is unchanged); the package's own reads add checked stand-ins for that read only. Crafted
checkpoints (each allowed global, numpy's flexible dtypes, BUILD / ``__setstate__`` on every allowed class, memo
bombs, lying lengths) and crafted files (FIFO, symlink to ``/dev/zero``, sparse and huge files, a folder) go through
every entry: ``read_checkpoint``, ``init_cfg`` (``mmvitreg.Pretrained``), ``load_from`` / ``tools/test.py`` /
``--resume`` (``GuardedRunner.load_checkpoint``) and mmengine's ``load_checkpoint`` for an mmvitreg model (the
inferencers); each is accepted or refused in one line naming the file, within a time and memory bound, and counted.
The crafted pickles are written opcode by opcode here: test data, not a reader."""

import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tool_env
from guard_helpers import TECHNIQUES, build_workspace, tool

from mmvitreg.fileio import TORCH_WEIGHTS_ONLY, checkpoint_safe_globals

pytestmark = pytest.mark.skipif(not TORCH_WEIGHTS_ONLY, reason='before torch 2.6 there is no allow-list')

#: the most a crafted file may add to the reading process's peak memory (VmHWM over the RSS before the file)
MEMORY_BOUND = 256 * 2**20
#: the most one crafted file may take through every entry, in seconds
TIME_BOUND = 10


# ---------------------------------------------------------------- pickle opcodes (protocol 2, as torch.save writes)


def glob(module: str, name: str) -> bytes:
    return b'c' + f'{module}\n{name}\n'.encode()


def tup(*items: bytes) -> bytes:
    return b'(' + b''.join(items) + b't'


def text(value: str) -> bytes:
    data = value.encode()
    return b'X' + struct.pack('<I', len(data)) + data


def num(value: int) -> bytes:
    return b'J' + struct.pack('<i', value)


def raw(data: bytes) -> bytes:
    """``bytes`` as protocol 2 writes them: ``_codecs.encode(str, 'latin1')``."""
    return glob('_codecs', 'encode') + tup(text(data.decode('latin1')), text('latin1')) + b'R'


def mapping(**items: bytes) -> bytes:
    return b'}(' + b''.join(text(k) + v for k, v in items.items()) + b'u'


NONE, TRUE, FALSE = b'N', b'\x88', b'\x89'
NUMPY = 'numpy._core.multiarray'
BUFFER = ('mmengine.logging.history_buffer', 'HistoryBuffer')


def dtype(code: str, state: bytes = b'') -> bytes:
    """``numpy.dtype(code, False, True)``, then BUILD ``state`` if given."""
    return glob('numpy', 'dtype') + tup(text(code), FALSE, TRUE) + b'R' + (state + b'b' if state else b'')


def dtype_state(itemsize: int, order: str = '|') -> bytes:
    return tup(num(3), text(order), NONE, NONE, NONE, num(itemsize), num(1), num(0))


def array(dtype_ops: bytes, shape, data: bytes, module: str = NUMPY, subtype=('numpy', 'ndarray')) -> bytes:
    """numpy's array pickle: ``_reconstruct(ndarray, (0,), b'b')``, then BUILD ``(1, shape, dtype, False, data)``."""
    return (
        glob(module, '_reconstruct')
        + tup(glob(*subtype), tup(num(0)), raw(b'b'))
        + b'R'
        + tup(num(1), tup(*map(num, shape)), dtype_ops, FALSE, raw(data))
        + b'b'
    )


def rebuilt_after_use(code: str, itemsize: int) -> bytes:
    """Issue 47's file: an array of dtype ``code``, then a BUILD of that same dtype (memo 900000) that sets its item
    size, after the array holds it: ``(array, dtype)``."""
    put, get = b'r' + struct.pack('<I', 900000), b'j' + struct.pack('<I', 900000)
    return tup(array(dtype(code) + put, (1,), b'x' * np.dtype(code).itemsize), get + dtype_state(itemsize) + b'b')


def history_buffer(state: bytes) -> bytes:
    return glob(*BUFFER) + b')\x81' + state + b'b'


def statistic(owner=BUFFER, name='mean') -> bytes:
    return glob('builtins', 'getattr') + tup(glob(*owner), text(name)) + b'R'


def good_buffer_state(**changes: bytes) -> bytes:
    items = dict(
        max_length=num(10),
        _log_history=array(dtype('f8'), (2,), b'\0' * 16),
        _count_history=array(dtype('f8'), (2,), b'\0' * 16),
        statistics_methods=mapping(mean=statistic()),
    )
    return mapping(**{**items, **changes})


#: name -> (the payload's opcodes, whether the read accepts it); each payload is one value of the checkpoint's
#: message_hub runtime_info, where issue 47's file put its |S8 array
PAYLOADS = {
    # numpy: what the stack writes, then each way a dtype or an array could change a buffer's size or layout
    'array_f8': (array(dtype('f8'), (2,), b'\0' * 16), True),
    'array_u4_numpy1_name': (array(dtype('u4'), (2,), b'\0' * 8, module='numpy.core.multiarray'), True),
    'array_S8_then_its_dtype_built_to_256MiB': (rebuilt_after_use('S8', 2**28), False),  # issue 47's file
    'array_S8_then_its_dtype_built_to_64KiB': (rebuilt_after_use('S8', 2**16), False),
    'array_f8_then_its_dtype_built_to_256MiB': (rebuilt_after_use('f8', 2**28), True),  # numpy keeps 8
    'array_S8_build_itemsize_256MiB': (array(dtype('S8', dtype_state(2**28)), (1,), b'x' * 8), False),
    'dtype_S8': (dtype('S8'), False),
    'dtype_U4': (dtype('U4'), False),
    'dtype_V8': (dtype('V8'), False),
    'dtype_O': (dtype('O'), False),
    'dtype_datetime': (dtype('M8[s]'), False),
    'dtype_structured': (
        glob('numpy', 'dtype') + tup(b']' + tup(text('a'), text('f8')) + b'a', FALSE, TRUE) + b'R',
        False,
    ),
    'dtype_f8_build_itemsize_256MiB': (dtype('f8', dtype_state(2**28)), True),  # numpy keeps 8 (checked below)
    'dtype_f8_build_big_endian_subarray': (
        dtype('f8', tup(num(3), text('>'), tup(dtype('f8'), tup(num(1000))), NONE, NONE, num(8000), num(8), num(0))),
        True,
    ),
    'dtype_class_called': (glob('numpy.dtypes', 'Float64DType') + b')R', True),
    'ndarray_called_uninitialised_memory': (glob('numpy', 'ndarray') + tup(tup(num(2**20)), text('f8')) + b'R', False),
    'reconstruct_of_another_class': (array(dtype('f8'), (2,), b'\0' * 16, subtype=BUFFER), False),
    'array_data_short': (array(dtype('f8'), (1000,), b'\0' * 8), False),
    'array_data_long': (array(dtype('f8'), (1,), b'\0' * 800), False),
    'array_shape_overflow': (array(dtype('f8'), (2**30, 2**30), b''), False),
    'array_shape_negative': (array(dtype('f8'), (-1,), b''), False),
    'array_shape_empty_huge': (array(dtype('f8'), (0, 2**30), b''), True),
    'array_object_from_list': (
        glob(NUMPY, '_reconstruct')
        + tup(glob('numpy', 'ndarray'), tup(num(0)), raw(b'b'))
        + b'R'
        + tup(num(1), tup(num(1)), dtype('O'), FALSE, b']' + num(1) + b'a')
        + b'b',
        False,
    ),
    'scalar_f8': (glob(NUMPY, 'scalar') + tup(dtype('f8'), raw(b'\0' * 8)) + b'R', True),
    'scalar_S8': (glob(NUMPY, 'scalar') + tup(dtype('S8'), raw(b'x' * 8)) + b'R', False),
    'scalar_short_data': (glob(NUMPY, 'scalar') + tup(dtype('f8'), raw(b'\0' * 2)) + b'R', False),
    # mmengine's HistoryBuffer and its statistic methods
    'history_buffer': (history_buffer(good_buffer_state()), True),
    'history_buffer_foreign_statistic': (
        history_buffer(good_buffer_state(statistics_methods=mapping(mean=glob('torch._utils', '_rebuild_tensor_v2')))),
        False,
    ),
    'history_buffer_max_length_text': (history_buffer(good_buffer_state(max_length=text('x'))), False),
    'history_buffer_unknown_field': (history_buffer(good_buffer_state(update=num(1))), False),
    'history_buffer_2d_history': (
        history_buffer(good_buffer_state(_log_history=array(dtype('f8'), (1, 2), b'\0' * 16))),
        False,
    ),
    'history_buffer_called': (glob(*BUFFER) + tup(b']' + num(1) + b'a') + b'R', False),
    'history_buffer_new_with_arguments': (glob(*BUFFER) + tup(num(1)) + b'\x81', False),
    'getattr_of_another_method': (statistic(name='update'), False),
    'getattr_of_another_class': (statistic(owner=('argparse', 'Namespace'), name='__init__'), False),
    # argparse.Namespace
    'namespace': (glob('argparse', 'Namespace') + b')\x81' + mapping(lr=num(1)) + b'b', True),
    'namespace_state_not_names': (glob('argparse', 'Namespace') + b')\x81}' + num(1) + num(2) + b'sb', False),
    'namespace_called': (glob('argparse', 'Namespace') + b')R', False),
    # code, memo and lengths
    'os_system': (glob('os', 'system') + tup(text('true')) + b'R', False),
    'memo_bomb_long_binput_2_26': (NONE + b'r' + struct.pack('<I', 2**26), True),
    'memo_get_unset': (b'j' + struct.pack('<I', 2**31), False),
    'unicode_length_lies': (b'X' + struct.pack('<I', 2**31 - 1) + b'short', False),
}


def splice(base: Path, path: Path, payload: bytes) -> None:
    """``base`` (a torch.save zip whose runtime_info x is the string PAYLOAD) with that value's opcodes replaced."""
    marker = text('PAYLOAD')
    with zipfile.ZipFile(base) as z:
        members = {n: z.read(n) for n in z.namelist()}
    pkl = next(n for n in members if n.endswith('data.pkl'))
    assert members[pkl].count(marker) == 1
    members[pkl] = members[pkl].replace(marker, payload)
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, data)


FUZZ = textwrap.dedent('''
    import json, os, sys, time, traceback
    import torch
    import mmvitreg  # first: a name imported from mmengine before it is mmengine's own function
    from mmengine.config import Config
    from mmengine.runner import load_checkpoint
    from mmvitreg.engine import CheckpointError, GuardedRunner
    from mmvitreg.engine.checkpoint import Pretrained
    from mmvitreg.fileio import read_checkpoint
    config, work, options, base, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    cfg = Config.fromfile(config)
    cfg.merge_from_dict(json.loads(options))  # the digits of the workspace (--resume reads the epoch length)
    cfg.work_dir = work
    runner = GuardedRunner.from_cfg(cfg)
    torch.save({'state_dict': runner.model.state_dict(), 'meta': {'epoch': 1, 'iter': 2},
                'message_hub': {'runtime_info': {'x': 'PAYLOAD'}}}, base)
    print('READY', flush=True)
    sys.stdin.readline()  # the crafted files are written from base


    def resume(path):
        runner._resuming = True
        try:
            return runner.load_checkpoint(path)
        finally:
            runner._resuming = False


    ENTRIES = {'read_checkpoint': read_checkpoint,
               'init_cfg': lambda path: Pretrained(checkpoint=path, prefix='backbone.')(runner.model.backbone),
               'load_from': runner.load_checkpoint,
               'tools/test.py': lambda path: runner.load_checkpoint(path, strict=True),
               '--resume': resume,
               'mmengine load_checkpoint': lambda path: load_checkpoint(runner.model, path)}


    def rss(field):
        return int(next(ln for ln in open('/proc/self/status') if ln.startswith(field)).split()[1]) * 1024


    results = {}
    for path in files:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')  # the peak (VmHWM) starts again from the current RSS
        before, start, outcome = rss('VmRSS'), time.time(), {}
        for entry, load in ENTRIES.items():
            try:
                load(path)
                outcome[entry] = 'accepted'
            except (CheckpointError, torch.serialization.pickle.UnpicklingError, RuntimeError) as e:
                outcome[entry] = 'refused: ' + str(e)
            except Exception as e:
                outcome[entry] = 'crash: ' + traceback.format_exc()
        outcome['seconds'] = time.time() - start
        outcome['memory'] = rss('VmHWM') - before
        results[path] = outcome
    print('RESULTS ' + json.dumps(results))
''')


@pytest.fixture(scope='module')
def fuzzed(tmp_path_factory):
    """Every crafted file through every entry, in one fresh interpreter (a crash would end it)."""
    root = tmp_path_factory.mktemp('fuzz')
    base = root / 'base.pth'
    files = {name: root / f'{name}.pth' for name in PAYLOADS}
    odd = {
        'fifo': root / 'fifo.pth',
        'symlink_to_dev_zero': root / 'zero.pth',
        'folder': root / 'folder.pth',
        'empty': root / 'empty.pth',
        'sparse_2GiB': root / 'sparse.pth',
        'larger_than_memory': root / 'huge.pth',
        'missing': root / 'missing.pth',
    }
    os.mkfifo(odd['fifo'])
    os.symlink('/dev/zero', odd['symlink_to_dev_zero'])
    odd['folder'].mkdir()
    odd['empty'].write_bytes(b'')
    for name, size in (
        ('sparse_2GiB', 2**31),
        ('larger_than_memory', os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') + 1),
    ):
        with open(odd[name], 'wb') as f:
            f.truncate(size)
    ws = build_workspace(root / 'ws')
    data = json.dumps(
        {
            f'{split}_dataloader.{k}': v
            for split in ('train', 'val', 'test')
            for k, v in (('dataset.data_root', str(ws / 'digits')), ('num_workers', 0), ('persistent_workers', False))
        }
    )
    log = root / 'stderr.log'  # the runner's log: a pipe nobody reads would fill and stop it
    with open(log, 'w') as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                '-c',
                FUZZ,
                str(TECHNIQUES[0]),
                str(root / 'work'),
                data,
                str(base),
                *map(str, files.values()),
                *map(str, odd.values()),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=tool_env(),
        )
        ready = iter(proc.stdout.readline, '')  # the runner logs to stdout too
        assert any(line.strip() == 'READY' for line in ready), log.read_text()[-3000:]
        for name, (payload, _) in PAYLOADS.items():
            splice(base, files[name], payload)
        out, _ = proc.communicate('go\n', timeout=600)
    assert proc.returncode == 0, f'the reading process ended with {proc.returncode}: {log.read_text()[-3000:]}'
    results = json.loads(next(ln for ln in out.splitlines() if ln.startswith('RESULTS '))[len('RESULTS ') :])
    named = {name: results[str(path)] for name, path in {**files, **odd}.items()}
    counts = {
        kind: sum(v.startswith(kind) for r in named.values() for k, v in r.items() if isinstance(v, str))
        for kind in ('accepted', 'refused', 'crash')
    }
    worst = max(named, key=lambda n: named[n]['memory'])
    print(
        f'\nfuzz: {len(named)} files x 6 entries: {counts}; worst peak memory {named[worst]["memory"] / 2**20:.1f} '
        f'MiB ({worst}); slowest {max(r["seconds"] for r in named.values()):.2f} s'
    )
    return named, counts, files, odd


def test_no_crafted_file_crashes_hangs_or_takes_memory_through_any_entry(fuzzed):
    named, counts, _, _ = fuzzed
    assert counts['crash'] == 0, {
        n: {k: v for k, v in r.items() if str(v).startswith('crash')} for n, r in named.items() if 'crash' in str(r)
    }
    assert counts['refused'] > counts['accepted'] > 0
    for name, result in named.items():
        assert result['seconds'] < TIME_BOUND, (name, result['seconds'])
        assert result['memory'] < MEMORY_BOUND, (name, result['memory'])


def test_each_refusal_is_one_line_naming_the_file(fuzzed):
    named, _, files, odd = fuzzed
    for name, path in {**files, **odd}.items():
        for entry, outcome in named[name].items():
            if str(outcome).startswith('refused'):
                assert '\n' not in outcome.strip() and str(path) in outcome or 'given to load_checkpoint' in outcome, (
                    name,
                    entry,
                    outcome,
                )


def test_the_read_accepts_what_the_stack_writes_and_refuses_the_rest(fuzzed):
    named, _, _, odd = fuzzed
    read = {name: named[name]['read_checkpoint'] for name in PAYLOADS}
    assert {n for n, r in read.items() if r == 'accepted'} == {n for n, (_, ok) in PAYLOADS.items() if ok}, read
    assert all(named[name]['read_checkpoint'].startswith('refused') for name in odd)
    assert 'not a regular file' in named['fifo']['read_checkpoint']
    assert 'not a regular file' in named['symlink_to_dev_zero']['read_checkpoint']
    assert 'bytes, outside the 1..' in named['larger_than_memory']['read_checkpoint']
    assert 'refused to unpickle' in read['array_S8_then_its_dtype_built_to_256MiB']
    accepted_file = named['history_buffer']  # a file the read accepts fills the model by every entry
    assert accepted_file['load_from'] == accepted_file['init_cfg'] == accepted_file['tools/test.py'] == 'accepted'


def test_numpy_leaves_every_allowed_dtype_as_it_is_whatever_its_build_state(tmp_path):
    """The allow-list lets a pickle BUILD the dtypes of these classes (numpy's ``__setstate__``): the stand-in
    ``numpy.dtype`` refuses flexible kinds, and numpy itself ignores an item size, byte order, sub-array or fields
    in the state of a fixed-size dtype. Run on every class the list allows, on the installed numpy."""
    classes = [g for g in checkpoint_safe_globals() if isinstance(g, type) and issubclass(g, np.dtype)]
    assert classes and not {'S', 'U', 'V', 'O', 'M', 'm'} & {c().char for c in classes}
    states = [
        (3, '>', None, None, None, 2**28, 1, 0),
        (3, '<', (np.dtype('f8'), (1000,)), None, None, 8000, 8, 0),
        (3, '|', None, ('a',), {'a': (np.dtype('f8'), 0)}, 16, 1, 16),
        (3, '<', None, None, None, 8, 8, 59),
    ]
    for cls in classes:
        for state in states:
            made = cls()
            expected = (made.itemsize, made.str, made.shape, made.fields)
            try:
                made.__setstate__(state)
            except (TypeError, ValueError):
                continue
            assert (made.itemsize, made.str, made.shape, made.fields) == expected, (cls, state)


def test_import_leaves_torchs_allow_list_and_what_torch_load_accepts(tmp_path):
    """Issue 47 finding 1: the |S8 array whose dtype BUILD sets a 256 MiB item size. torch alone refuses it; after
    ``import mmvitreg`` torch.load outside the package still does (it loaded and then segfaulted on deepcopy), with
    torch's allow-list unchanged; mmvitreg's own reader refuses it in one line."""
    base, crafted = tmp_path / 'base.pth', tmp_path / 'crafted.pth'
    torch.save({'state_dict': {'w': torch.ones(2)}, 'message_hub': {'runtime_info': {'x': 'PAYLOAD'}}}, base)
    splice(base, crafted, PAYLOADS['array_S8_then_its_dtype_built_to_256MiB'][0])
    script = textwrap.dedent(f'''
        import copy, json, sys, torch
        import mmengine.runner, mmpretrain.models  # the hosts, whose imports add torch's own entries
        def state():
            try:
                copy.deepcopy(torch.load({str(crafted)!r}, weights_only=True))
                loaded = 'loaded'
            except Exception as e:
                loaded = type(e).__name__
            return sorted(map(str, torch.serialization.get_safe_globals())), loaded
        before = state()
        import mmvitreg
        from mmvitreg.fileio import CheckpointError, read_checkpoint
        try:
            read_checkpoint({str(crafted)!r})
        except CheckpointError as e:
            ours = str(e)
        print(json.dumps([before, state(), ours]))
    ''')
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, env=tool_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after, ours = json.loads(proc.stdout.splitlines()[-1])
    assert before == after and before[1] == 'UnpicklingError'
    assert ours.startswith(f'checkpoint {crafted}: refused to unpickle') and '\n' not in ours


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('fuzz_ws'))


@pytest.mark.parametrize('flags', [['--resume'], ['--cfg-options', 'load_from=FILE'], ['test']])
def test_the_tools_refuse_issue_47s_file_in_one_line(ws, tmp_path, flags):
    """tools/train.py --resume on it segfaulted (rc 139); each tool now stops with one line naming the file."""
    base, crafted = tmp_path / 'base.pth', tmp_path / 'crafted.pth'
    torch.save(
        {
            'state_dict': {'w': torch.ones(2)},
            'meta': {'epoch': 1, 'iter': 2},
            'message_hub': {'runtime_info': {'x': 'PAYLOAD'}},
        },
        base,
    )
    splice(base, crafted, PAYLOADS['array_S8_then_its_dtype_built_to_64KiB'][0])
    data = [
        f'train_dataloader.dataset.data_root={ws / "digits"}',
        f'val_dataloader.dataset.data_root={ws / "digits"}',
        f'test_dataloader.dataset.data_root={ws / "digits"}',
    ]
    if flags == ['test']:
        argv = ['test', [str(TECHNIQUES[0]), str(crafted), '--work-dir', str(tmp_path / 'w'), '--cfg-options', *data]]
    elif flags[0] == '--resume':
        argv = [
            'train',
            [str(TECHNIQUES[0]), '--work-dir', str(tmp_path / 'w'), '--resume', str(crafted), '--cfg-options', *data],
        ]
    else:
        argv = [
            'train',
            [str(TECHNIQUES[0]), '--work-dir', str(tmp_path / 'w'), '--cfg-options', f'load_from={crafted}', *data],
        ]
    with pytest.raises(SystemExit) as e:
        tool(argv[0])(argv[1])
    message = str(e.value.code)
    assert message.startswith(f'error: checkpoint {crafted}: refused to unpickle') and '\n' not in message
