"""Label maps from strangers (issue 47.2, 47.4, 47.8): every reader (the ``LoadTokenLabelMap`` transform on ``.pt`` and
``.npy`` files, the packed ``LabelMapStore``, the generator's re-validation of existing maps) is fed crafted files in
a fresh process: one storage read with other dtypes, offsets or strides, memo bombs, headers declaring anything,
non-finite scores, float and out-of-range class indices, sparse and huge files, FIFOs, devices and symlinks. None
crashes or hangs the process, its peak memory stays within a bound, every map accepted is exactly what
``torch.load(weights_only=True)`` / ``np.load(allow_pickle=False)`` reads and passes an independent value check,
and every refusal is one line naming the file (in a DataLoader worker too)."""

import json
import os
import random
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from conftest import REPO, tool_env
from crafted_maps import STORAGES, craft_map, craft_npy, craft_tensors, member_values, memo_bomb, reach

from mmvitreg.datasets.label_map_store import LabelMapStore, pack_label_maps
from mmvitreg.datasets.label_maps import LabelMapError, load_label_map, save_label_map

NUM_CLASSES = 1000
FUZZ_PT, FUZZ_NPY, FUZZ_SHARED = 300, 150, 60
#: peak memory a reading process may add to what it held after its imports, for any file
MEMORY_BOUND_MB = 64

#: reads each file given on the command line in a fresh process through the transform and the generator's
#: re-validation; one JSON line per file, the peak RSS last
READER = '''
import importlib.util, json, os, sys
import numpy as np, torch
from mmvitreg.datasets.load_token_label_map import LoadTokenLabelMap


def peak_mb():  # this image's peak RSS (VmHWM): ru_maxrss keeps the parent's peak across fork and exec
    with open('/proc/self/status') as f:
        return next(int(line.split()[1]) for line in f if line.startswith('VmHWM')) / 1024


spec = importlib.util.spec_from_file_location('generate_label_maps', os.path.join(sys.argv[1], 'tools',
                                                                                   'generate_label_maps.py'))
generator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generator)
map_shape = json.loads(sys.argv[2])
before = peak_mb()
for path in sys.argv[3:]:
    folder, name = os.path.split(path)
    transform = LoadTokenLabelMap(folder, img_prefix=folder, num_classes=1000, map_shape=map_shape)
    try:
        img_path = os.path.join(folder, os.path.splitext(name)[0] + '.JPEG')
        result = transform(dict(img=np.zeros((4, 4, 3), np.uint8), img_path=img_path))
        ours = result['token_label_map'].label_map
    except Exception as e:
        problem = generator.existing_map_problem(path, 5, 1000)
        print(json.dumps(dict(path=path, refused=str(e), type=type(e).__name__, generator=problem)), flush=True)
        continue
    problem = generator.existing_map_problem(path, ours.shape[1], 1000)
    print(json.dumps(dict(path=path, accepted=True, map=ours.astype(np.float64).tolist(), dtype=str(ours.dtype),
                          generator=problem)), flush=True)
print(json.dumps(dict(peak_rss_mb=peak_mb(), rss_before_mb=before)))
'''


def read_in_a_fresh_process(paths, map_shape=None, timeout=300):
    proc = subprocess.run(
        [sys.executable, '-c', READER, str(REPO), json.dumps(map_shape), *map(str, paths)],
        env=tool_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f'the reader crashed (rc {proc.returncode}): {proc.stderr[-2000:]}'
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    return {r['path']: r for r in lines[:-1]}, lines[-1]


def valid_map(t):
    """The value check, independently in torch: a (2, k, H, W) float16/32 map, finite, integer classes in range."""
    return (
        isinstance(t, torch.Tensor)
        and t.layout == torch.strided
        and t.dtype in (torch.float16, torch.float32)
        and t.dim() == 4
        and t.shape[0] == 2
        and t.numel() > 0
        and bool(torch.isfinite(t).all())
        and bool((t[1] == t[1].round()).all())
        and bool((t[1] >= 0).all())
        and bool((t[1] < NUM_CLASSES).all())
    )


def reference(path):
    """What a well-kept reader alone makes of the file (``.pt`` archives with a compressed member refused): a tensor
    that passes :func:`valid_map`, or None."""
    try:
        if str(path).endswith('.npy'):
            with open(path, 'rb') as f:  # numpy would allocate what the header declares: read it first
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, dtype = read(f)
                if np.prod(shape) * dtype.itemsize != os.path.getsize(path) - f.tell():
                    return None  # the one rule beyond numpy's: the data is exactly what the header declares
            loaded = torch.from_numpy(np.load(path, allow_pickle=False))
        elif zipfile.is_zipfile(path) and any(m.compress_type for m in zipfile.ZipFile(path).infolist()):
            return None  # the one rule beyond torch's: torch.save never compresses, torch.load would inflate a bomb
        else:
            loaded = torch.load(path, weights_only=True)
    except Exception:
        return None
    return loaded if valid_map(loaded) else None


VALUES = {
    'classes': None,
    'nan': [0.0, float('nan'), 2.0],
    'inf': [1.0, float('inf')],
    'fraction': [2.5, 1.0],
    'negative': [-1.0, 3.0],
    'too large': [5000.0, 7.0],
}


def fuzz_pt(rng: random.Random, path):
    """One crafted ``.pt`` map: a 4-D (sometimes other) tensor of random sizes, contiguous / permuted / arbitrary
    strides, an offset, a storage that fits, falls short or runs long, a member that matches or not, any of five
    dtypes, stored or deflated, values torch reads but the value check refuses, and now and then numbers torch
    never writes (negative, mismatched lengths)."""
    rank = rng.choice([4, 4, 4, 4, 3, 5])
    size = [2] + [rng.randint(0 if rng.random() < 0.05 else 1, 5) for _ in range(rank - 1)]
    order = list(range(rank))
    layout = rng.choice(['contiguous', 'permuted', 'arbitrary'])
    if layout == 'permuted':
        rng.shuffle(order)
    stride, step = [0] * rank, 1
    for dim in reversed(order):
        stride[dim], step = step, step * size[dim]
    if layout == 'arbitrary':
        stride = [rng.randint(0, 40) for _ in range(rank)]
    offset = rng.choice([0, 0, 0, rng.randint(1, 60)])
    end = reach(size, stride, offset)
    numel = rng.choice(
        [end] * 4 + [end + rng.randint(1, 50), max(0, end - rng.randint(1, 30)), end * rng.choice([2, 1000])]
    )
    kwargs = dict(
        numel=numel,
        storage=rng.choice(['HalfStorage'] * 3 + ['FloatStorage'] * 2 + sorted(STORAGES)),
        compress=zipfile.ZIP_DEFLATED if rng.random() < 0.15 else zipfile.ZIP_STORED,
        values=VALUES[rng.choice(['classes'] * 5 + sorted(VALUES))],
    )
    odd = rng.random()
    if odd < 0.05:
        stride[rng.randrange(rank)] = -rng.randint(1, 5)
    elif odd < 0.08:
        offset = -rng.randint(1, 5)
    elif odd < 0.11:
        stride = stride[:-1]
    elif odd < 0.16:
        kwargs['member_bytes'] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    return craft_map(path, size, stride, offset, **kwargs)


def fuzz_shared(rng: random.Random, path):
    """One member read by two tensors with other dtypes, sizes, offsets or strides (the map the hand-written reader
    read out of bounds: FloatStorage(N), then HalfStorage(2N) at offset N-1); the map alone or in a list."""
    n = rng.choice([159, 160, rng.randint(1, 400)])
    first, second = (
        rng.choice(['FloatStorage', 'DoubleStorage', 'LongStorage']),
        rng.choice(['HalfStorage', 'BFloat16Storage']),
    )
    ratio = STORAGES[first].itemsize // STORAGES[second].itemsize
    stride = rng.choice([(80, 16, 4, 1), (80, 16, 1, 4), (0, 16, 4, 1), (1, 2, 3, 4)])
    offset = rng.choice([n - 1, n, 0, ratio * n - 160, rng.randint(0, 2 * n)])
    tensors = [
        (first, n, '0', (n,), (1,), 0),
        (second, rng.choice([ratio * n, ratio * n + 8, 4 * n]), '0', (2, 5, 4, 4), stride, offset),
    ]
    return craft_tensors(path, tensors, {'0': member_values(n, first)}, last_only=rng.random() < 0.5)


def fuzz_npy(rng: random.Random, path):
    """One crafted ``.npy`` map: a header (written by numpy) declaring a random shape, dtype (objects, structures
    and bytes among them) and order, over data of that length, shorter, longer or absurdly short for its shape."""
    shape = rng.choice(
        [
            (2, 5, 4, 4),
            (2, 3, 2, 5),
            (3, 5, 4, 4),
            (2, 5, 4),
            (2, 0, 4, 4),
            (1 << 40, 2, 1, 1),
            (2, 5, 4, rng.randint(1, 9)),
        ]
    )
    dtype = rng.choice(['<f2'] * 4 + ['<f4'] * 2 + ['>f2', '<f8', '<i8', '|O', '|S4', '<u2', [('a', '<f2')]])
    dtype = np.dtype(dtype)
    count = int(np.prod(shape[:4])) if np.prod(shape) < 1 << 20 else 160
    values = VALUES[rng.choice(['classes'] * 5 + sorted(VALUES))] if dtype.kind == 'f' else None
    values = list(range(10)) if values is None else values
    if dtype.kind in 'fiu':
        data = np.resize(np.array(values, np.float64), count).astype(dtype).tobytes()
    else:
        data = bytes(rng.randrange(256) for _ in range(count * max(dtype.itemsize, 1)))
    length = rng.choice([len(data)] * 5 + [len(data) - rng.randint(1, 16), len(data) + rng.randint(1, 16), 0])
    return craft_npy(path, shape, dtype, (data * 2)[: max(length, 0)], fortran=rng.random() < 0.1)


def test_fuzz_crafted_maps_through_the_transform_and_the_generator_check(tmp_path):
    """510 crafted files read in one fresh process by the transform and by the generator's re-validation: the
    process does not crash, both readers agree, every map accepted is exactly the tensor torch.load (or np.load)
    reads and passes an independent value check, every refusal is one line naming the file, every file torch or
    numpy reads as a valid map is accepted, and the process's memory grows by less than the bound."""
    rng = random.Random(0)
    paths = [fuzz_pt(rng, tmp_path / f'pt_{i:03d}.pt') for i in range(FUZZ_PT)]
    paths += [fuzz_shared(rng, tmp_path / f'shared_{i:03d}.pt') for i in range(FUZZ_SHARED)]
    paths += [fuzz_npy(rng, tmp_path / f'npy_{i:03d}.npy') for i in range(FUZZ_NPY)]
    results, memory = read_in_a_fresh_process(paths)
    assert len(results) == len(paths)
    counts = {'accepted': 0, 'refused': 0}
    for path in map(str, paths):
        result, expected = results[path], reference(path)
        if result.get('accepted'):
            counts['accepted'] += 1
            assert expected is not None, path
            assert result['dtype'] == str(expected.numpy().dtype), path
            np.testing.assert_array_equal(np.array(result['map']), expected.double().numpy(), err_msg=path)
            assert result['generator'] is None, (path, result['generator'])
        else:
            counts['refused'] += 1
            assert expected is None, (path, result['refused'])  # nothing valid is refused
            assert result['type'] == 'LabelMapError', (path, result)
            assert path in result['refused'] and '\n' not in result['refused'], result['refused']
            assert result['generator'] == result['refused'], result  # the generator rewrites it, saying why
    assert counts['accepted'] >= 40 and counts['refused'] >= 300, counts  # both sides exercised
    assert memory['peak_rss_mb'] - memory['rss_before_mb'] < MEMORY_BOUND_MB, memory
    print(
        f"\nfuzz: {len(paths)} crafted maps ({FUZZ_PT} .pt, {FUZZ_SHARED} .pt sharing a member, {FUZZ_NPY} .npy): "
        f"{counts['accepted']} accepted (each equal to torch.load / np.load), {counts['refused']} refused by name, "
        f"0 crashes; peak RSS +{memory['peak_rss_mb'] - memory['rss_before_mb']:.0f} MB"
    )


def special_files(folder):
    """``{path: what the refusal says}``: the files of the issue's findings, and a few more."""
    folder.mkdir()
    n = 159  # FloatStorage(159) and HalfStorage(318) at offset 158: a (2, 5, 4, 4) view ending at the member's end
    one_member = [
        ('FloatStorage', n, '0', (n,), (1,), 0),
        ('HalfStorage', 2 * n, '0', (2, 5, 4, 4), (80, 16, 1, 4), n - 1),
    ]
    files = {
        craft_tensors(
            folder / 'one_member_two_dtypes.pt', one_member, {'0': member_values(n, 'FloatStorage')}, last_only=True
        ): 'Unsupported operand',
        craft_tensors(
            folder / 'one_member_two_dtypes_listed.pt', one_member, {'0': member_values(n, 'FloatStorage')}
        ): 'Trying to resize storage that is not resizable',
        memo_bomb(folder / 'memo_bomb.pt'): 'got a NoneType',
        craft_npy(folder / 'huge_header.npy', (1 << 40, 2, 5, 4), '<f2', bytes(320)): 'declares',
        craft_map(
            folder / 'zip_bomb.pt',
            (2, 1, 2, 2),
            (4, 4, 2, 1),
            numel=1 << 29,
            member_size=1 << 30,
            compress=zipfile.ZIP_DEFLATED,
        ): 'is compressed, which torch.save never does',
        craft_npy(folder / 'pickled.npy', (2, 5, 4, 4), '|O', bytes(1280)): 'dtype object',
        craft_npy(folder / 'zero_size_dtype.npy', (2, 5, 4, 4), 'V0', b''): 'holds no bytes',
    }
    for name, size in (('sparse_2gib.pt', 2 << 30), ('sparse_8gib.npy', 8 << 30)):
        with open(folder / name, 'wb') as f:
            f.truncate(size)
        files[folder / name] = f'holds {size} bytes, outside the 1..{16 << 20}'
    os.mkfifo(folder / 'fifo.pt')
    os.mkfifo(folder / 'fifo_target')
    for name, target in (('dev_zero.pt', '/dev/zero'), ('to_fifo.npy', folder / 'fifo_target'), ('folder.pt', '/tmp')):
        os.symlink(target, folder / name)
    os.mkfifo(folder / 'fifo_too.npy')
    files.update(
        {
            folder / 'fifo.pt': 'is not a regular file',
            folder / 'dev_zero.pt': 'is not a regular file',
            folder / 'to_fifo.npy': 'is not a regular file',
            folder / 'fifo_too.npy': 'is not a regular file',
            folder / 'folder.pt': 'is not a regular file',
        }
    )
    os.symlink(folder / 'nowhere.npy', folder / 'dangling.npy')
    files[folder / 'dangling.npy'] = 'does not exist'
    return files


def test_findings_are_refused_by_name_without_a_hang_within_the_memory_bound(tmp_path):
    """The issue's files, read in a fresh process with a time limit: one member read as float32 then float16 at
    offset N-1 (read out of bounds before), the memo bomb (2 GB peak before), a 1 MB zip bomb inflating to
    1 GiB (which torch.load alone would inflate), sparse 2 GiB (3.09 GB peak)
    and 8 GiB (MemoryError) files, a symlink to /dev/zero (MemoryError), a FIFO named x.pt (a hang), a symlink to a
    FIFO, to a folder, a dangling one, an .npy header declaring 2**40 rows, a pickled .npy: each refused by one line
    naming it, in a process whose peak memory grows by less than the bound; a symlink to a valid map is read."""
    files = special_files(tmp_path / 'maps')
    save_label_map(str(tmp_path / 'valid.npy'), torch.randn(5, 4, 4), torch.randint(0, 1000, (5, 4, 4)).float())
    os.symlink(tmp_path / 'valid.npy', tmp_path / 'maps' / 'link_to_valid.npy')
    results, memory = read_in_a_fresh_process([*files, tmp_path / 'maps' / 'link_to_valid.npy'], timeout=240)
    for path, says in files.items():
        result = results[str(path)]
        assert 'refused' in result and str(path) in result['refused'] and says in result['refused'], result
        assert '\n' not in result['refused'] and result['generator'] == result['refused'], result
        assert result['type'] == ('FileNotFoundError' if 'dangling' in path.name else 'LabelMapError')
    assert results[str(tmp_path / 'maps' / 'link_to_valid.npy')]['accepted']
    assert memory['peak_rss_mb'] - memory['rss_before_mb'] < MEMORY_BOUND_MB, memory
    print(
        f"\nworst crafted files: peak RSS {memory['peak_rss_mb']:.0f} MB "
        f"(+{memory['peak_rss_mb'] - memory['rss_before_mb']:.0f} MB over the imports)"
    )


def test_the_expected_shape_bounds_a_file_before_it_is_read(tmp_path):
    """With map_shape (k, H, W) known from the config a file is refused for its size alone: the memo bomb is
    too small for a (2, 5, 18, 18) map, a 1 MB file too large; a map of another shape is refused by its shape."""
    memo_bomb(tmp_path / 'bomb.pt')
    (tmp_path / 'big.pt').write_bytes(bytes(1 << 20))
    save_label_map(str(tmp_path / 'other.npy'), torch.randn(5, 18, 19), torch.zeros(5, 18, 19))
    save_label_map(str(tmp_path / 'right.pt'), torch.randn(5, 18, 18), torch.zeros(5, 18, 18))
    for name, says in (
        ('bomb.pt', r'holds \d+ bytes, outside the 6480..'),
        ('big.pt', 'holds 1048576 bytes, '),
        ('other.npy', r'is not \(2, k, H, W\) = \(2, 5, 18, 18\)'),
    ):
        with pytest.raises(LabelMapError, match=f'{tmp_path / name}.*{says}'):
            load_label_map(str(tmp_path / name), map_shape=(5, 18, 18))
    assert load_label_map(str(tmp_path / 'right.pt'), map_shape=(5, 18, 18)).shape == (2, 5, 18, 18)


class _Maps(torch.utils.data.Dataset):
    def __init__(self, path):
        self.path = path

    def __len__(self):
        return 1

    def __getitem__(self, index):
        return load_label_map(self.path)


@pytest.mark.parametrize('kind', ['fifo', 'shared member'])
def test_a_refusal_in_a_dataloader_worker_names_the_file(tmp_path, kind):
    """It used to be 'DataLoader worker (pid ...) exited unexpectedly', naming no file (or a hang, for a FIFO)."""
    path = tmp_path / 'x.pt'
    if kind == 'fifo':
        os.mkfifo(path)
    else:
        craft_tensors(
            path,
            [('FloatStorage', 159, '0', (159,), (1,), 0), ('HalfStorage', 318, '0', (2, 5, 4, 4), (80, 16, 1, 4), 158)],
            {'0': member_values(159, 'FloatStorage')},
            last_only=True,
        )
    with pytest.raises(LabelMapError) as e:
        next(iter(torch.utils.data.DataLoader(_Maps(str(path)), num_workers=1, batch_size=None, timeout=120)))
    last = str(e.value).strip().splitlines()[-1]
    assert last.startswith('mmvitreg.datasets.label_maps.LabelMapError: ') and str(path) in last


def packed_store(tmp_path, count=4):
    for i in range(count):
        save_label_map(
            str(tmp_path / 'labels' / f'a_{i}.npy'),
            torch.randn(5, 4, 4),
            torch.arange(5.0).view(5, 1, 1).expand(5, 4, 4) + i,
        )
    pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), progress=False)
    return tmp_path / 'store'


@pytest.mark.parametrize(
    'where,value,says',
    [
        (1, 2.5, 'class indices that are not integers'),
        (0, np.nan, 'NaN or infinite'),
        (0, np.inf, 'NaN or infinite'),
        (1, -1.0, 'class indices -1..'),
        (1, 12.0, 'class indices 1..12 are out of range for num_classes=10'),
    ],
)
def test_the_store_refuses_what_the_file_readers_refuse(tmp_path, where, value, says):
    """A store whose maps.npy was edited after packing: LabelMapStore.get used to return class 2.5 (trained as class
    2), NaN and inf logits, and class -1; now the value check of the file readers refuses each, naming the store's
    file, the key and the image."""
    store = packed_store(tmp_path)
    np.testing.assert_array_equal(
        LabelMapStore(str(store), 10).get('a_1'), load_label_map(str(tmp_path / 'labels' / 'a_1.npy'))
    )
    maps = np.load(store / 'maps.npy', mmap_mode='r+')
    maps[1, where, 0, 0, 0] = value  # a logit ([0]) or a class index ([1]) of the map of a_1
    maps.flush()
    del maps
    with pytest.raises(LabelMapError, match=f"{store / 'maps.npy'}\\['a_1'\\] \\(of img/a_1.JPEG\\): .*{says}"):
        LabelMapStore(str(store), num_classes=10).get('a_1', 'img/a_1.JPEG')
    LabelMapStore(str(store), num_classes=10).get('a_2')  # the others still read


def test_crafted_stores_are_refused_by_name_without_a_hang(tmp_path):
    """A store's files replaced by a FIFO, a symlink to /dev/zero, a header declaring more maps than the file holds,
    pickled keys, or a packed.json that is a FIFO: refused naming the file when the store is opened or first read;
    nothing blocks (each case would hang or read without bound if it were opened plainly)."""
    cases = {}
    for case in ('maps_fifo', 'maps_dev_zero', 'maps_header', 'keys_pickled', 'index_fifo', 'maps_fortran'):
        store = packed_store(tmp_path / case, count=2)
        if case == 'maps_fifo':
            os.remove(store / 'maps.npy')
            os.mkfifo(store / 'maps.npy')
        elif case == 'maps_dev_zero':
            os.remove(store / 'maps.npy')
            os.symlink('/dev/zero', store / 'maps.npy')
        elif case == 'maps_header':
            craft_npy(store / 'maps.npy', (2000, 2, 5, 4, 4), '<f2', bytes(2 * 320))
        elif case == 'keys_pickled':
            craft_npy(store / 'keys.npy', (2,), '|O', bytes(16))
        elif case == 'index_fifo':
            os.remove(store / 'packed.json')
            os.mkfifo(store / 'packed.json')
        else:
            craft_npy(store / 'maps.npy', (2, 2, 5, 4, 4), '<f2', bytes(2 * 640), fortran=True)
        cases[case] = store
    script = '''
import json, sys
from mmvitreg.datasets.label_map_store import LabelMapStore
for store in sys.argv[1:]:
    try:
        LabelMapStore(store).get('a_0')
        print(json.dumps(dict(store=store, accepted=True)))
    except Exception as e:
        print(json.dumps(dict(store=store, refused=str(e), type=type(e).__name__)))
'''
    proc = subprocess.run(
        [sys.executable, '-c', script, *map(str, cases.values())],
        env=tool_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = {r['store']: r for r in map(json.loads, proc.stdout.splitlines())}
    names = {
        'maps_fifo': 'maps.npy',
        'maps_dev_zero': 'maps.npy',
        'maps_header': 'maps.npy',
        'keys_pickled': 'keys.npy',
        'index_fifo': 'packed.json',
        'maps_fortran': 'maps.npy',
    }
    for case, store in cases.items():
        result = results[str(store)]
        assert result.get('type') == 'LabelMapError' and '\n' not in result['refused'], (case, result)
        assert str(store / names[case]) in result['refused'] or str(store) in result['refused'], (case, result)


def test_the_official_and_generator_formats_read_alike(tmp_path):
    """The official layout (a permuted fp16 view, torch.save) and the generator's .npy give the same array, read by
    torch.load(weights_only=True) and numpy; the .npy map is writable and skips torch.load entirely."""
    value, index = torch.randn(18, 18, 1000, generator=torch.Generator().manual_seed(0)).topk(5)
    official = torch.stack([value.half(), index.half()]).permute(0, 3, 1, 2)
    torch.save(official, tmp_path / 'official.pt')
    save_label_map(str(tmp_path / 'generated.npy'), official[0], official[1])
    from_pt = load_label_map(str(tmp_path / 'official.pt'), NUM_CLASSES, (5, 18, 18))
    from_npy = load_label_map(str(tmp_path / 'generated.npy'), NUM_CLASSES, (5, 18, 18))
    np.testing.assert_array_equal(from_pt, official.numpy())
    np.testing.assert_array_equal(from_npy, official.numpy())
    assert from_npy.flags.writeable and from_pt.flags.writeable


def test_no_hand_written_unpickler_is_left():
    for name in ('label_maps.py', 'label_map_store.py', 'load_token_label_map.py'):
        source = (REPO / 'mmvitreg' / 'datasets' / name).read_text()
        assert 'import pickle' not in source and 'pickle.Unpickler' not in source and 'load_checkpoint' not in source
