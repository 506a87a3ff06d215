"""Label maps read within their bounds (issue 43.4-5): every size, stride, offset and member length of a ``.pt`` map
is checked against what was read before a view is made, a compressed member is refused before it is inflated,
class indices are checked as a map or a packed store's map is read, and every refusal is one line naming the file,
in the main process and in a DataLoader worker. The reader stays faster than ``torch.load(weights_only=True)``."""
import io
import json
import random
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
import torch

from conftest import REPO, tool_env
from crafted_maps import STORAGES, craft_map
from mmvitreg.datasets.label_map_store import LabelMapStore, pack_label_maps
from mmvitreg.datasets.label_maps import LabelMapError, _read_tensor, load_label_map, save_label_map

FUZZ_FILES = 400

#: reads each file given on the command line in a fresh process: one JSON line per file, the peak RSS last
READER = '''
import json, resource, sys
import numpy as np, torch
from mmvitreg.datasets.label_maps import load_label_map


def peak_mb():  # this image's peak RSS (VmHWM): ru_maxrss keeps the parent's peak across fork and exec
    try:
        with open('/proc/self/status') as f:
            return next(int(line.split()[1]) for line in f if line.startswith('VmHWM')) / 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


before = peak_mb()
for path in sys.argv[1:]:
    try:
        ours = load_label_map(path)
    except Exception as e:
        print(json.dumps(dict(path=path, refused=str(e), type=type(e).__name__)), flush=True)
        continue
    try:
        theirs = torch.load(path, weights_only=True).numpy()
    except Exception as e:
        theirs = 'torch.load refuses: ' + str(e).splitlines()[0]
    same = isinstance(theirs, np.ndarray) and theirs.dtype == ours.dtype and np.array_equal(theirs, ours)
    print(json.dumps(dict(path=path, accepted=True, same_as_torch=bool(same), torch=str(theirs)[:200])), flush=True)
print(json.dumps(dict(peak_rss_mb=peak_mb(), rss_before_mb=before)))
'''


def read_in_a_fresh_process(paths):
    proc = subprocess.run([sys.executable, '-c', READER, *map(str, paths)], env=tool_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f'the reader crashed (rc {proc.returncode}): {proc.stderr[-2000:]}'
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    return lines[:-1], lines[-1]


def fuzz_case(rng: random.Random, path):
    """One crafted map: a 4-D (sometimes other) tensor of random sizes, contiguous / permuted / arbitrary strides,
    an offset, a storage that fits, falls short or runs long, a member that matches or not, any of five dtypes, stored
    or deflated, and now and then numbers torch never writes (negative, mismatched lengths)."""
    rank = rng.choice([4, 4, 4, 4, 3, 5])
    size = [2] + [rng.randint(0 if rng.random() < .05 else 1, 5) for _ in range(rank - 1)]
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
    reach = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else offset
    numel = rng.choice([reach] * 4 + [reach + rng.randint(1, 50), max(0, reach - rng.randint(1, 30)),
                                      reach * rng.choice([2, 1000])])
    kwargs = dict(numel=numel, storage=rng.choice(['HalfStorage'] * 3 + ['FloatStorage'] * 2 + sorted(STORAGES)),
                  compress=zipfile.ZIP_DEFLATED if rng.random() < .15 else zipfile.ZIP_STORED)
    odd = rng.random()
    if odd < .05:
        stride[rng.randrange(rank)] = -rng.randint(1, 5)
    elif odd < .08:
        offset = -rng.randint(1, 5)
    elif odd < .11:
        stride = stride[:-1]
    elif odd < .16:
        kwargs['member_bytes'] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    return craft_map(path, size, stride, offset, **kwargs)


def test_fuzz_crafted_maps_never_crash_and_never_read_out_of_bounds(tmp_path):
    """400 crafted files read in one fresh process: it does not crash, every refusal is one line naming the file,
    and every map it accepts is exactly what torch.load (which checks every view against its storage) reads."""
    rng = random.Random(0)
    paths = [fuzz_case(rng, tmp_path / f'map_{i:03d}.pt') for i in range(FUZZ_FILES)]
    results, _ = read_in_a_fresh_process(paths)
    assert len(results) == FUZZ_FILES
    accepted = [r for r in results if r.get('accepted')]
    refused = [r for r in results if 'refused' in r]
    assert all(r['same_as_torch'] for r in accepted), [r for r in accepted if not r['same_as_torch']][:3]
    assert all(r['path'] in r['refused'] and '\n' not in r['refused'] for r in refused), refused[:3]
    assert all(r['type'] == 'LabelMapError' for r in refused), {r['type'] for r in refused}
    assert len(accepted) > 50 and len(refused) > 150  # both sides exercised
    print(f'\nfuzz: {FUZZ_FILES} crafted maps, {len(accepted)} accepted (each equal to torch.load), '
          f'{len(refused)} refused by name')


def test_an_out_of_bounds_map_and_a_1_gib_zip_bomb_are_refused_by_name_within_1_gb(tmp_path):
    """A 1 KB map whose strides reach 2**40 values past its 160 (it used to segfault the process) and a 1 MB map that
    deflates to a 1 GiB storage declared for 8 values (read whole before: 2.9 GB peak): refused by name, the peak
    resident memory of the reading process under 1 GB and within 64 MB of what it held before the reads."""
    far = craft_map(tmp_path / 'far.pt', (2, 5, 4, 4), (1 << 40, 16, 4, 1), numel=160)
    bomb = craft_map(tmp_path / 'bomb.pt', (2, 1, 2, 2), (4, 4, 2, 1), numel=1 << 29, member_size=1 << 30,
                     compress=zipfile.ZIP_DEFLATED)
    assert far.stat().st_size < 2048 and bomb.stat().st_size < 2 << 20
    results, memory = read_in_a_fresh_process([far, bomb])
    assert [r['path'] for r in results if 'refused' in r] == [str(far), str(bomb)]
    assert 'ends at value 1099511627856 of its 160-value storage' in results[0]['refused']
    assert 'is compressed, which torch.save never does' in results[1]['refused']
    assert memory['peak_rss_mb'] < 1000 and memory['peak_rss_mb'] - memory['rss_before_mb'] < 64, memory
    print(f"\npeak RSS {memory['peak_rss_mb']:.0f} MB ({memory['rss_before_mb']:.0f} MB after the imports)")


class _Maps(torch.utils.data.Dataset):
    def __init__(self, path):
        self.path = path

    def __len__(self):
        return 1

    def __getitem__(self, index):
        return load_label_map(self.path)


def test_a_refusal_in_a_dataloader_worker_names_the_file(tmp_path):
    """It used to be 'DataLoader worker (pid ...) exited unexpectedly', naming no file."""
    far = str(craft_map(tmp_path / 'far.pt', (2, 5, 4, 4), (1 << 40, 16, 4, 1), numel=160))
    with pytest.raises(LabelMapError) as e:
        next(iter(torch.utils.data.DataLoader(_Maps(far), num_workers=1, batch_size=None)))
    last = str(e.value).strip().splitlines()[-1]
    assert last.startswith(f'mmvitreg.datasets.label_maps.LabelMapError: malformed token label map {far}: ')


def official_map(path):
    """A map as the official generator writes it: top-5 of an (H, W, C) output, stacked and permuted, fp16."""
    value, index = torch.randn(18, 18, 1000, generator=torch.Generator().manual_seed(0)).topk(5)
    torch.save(torch.stack([value.half(), index.half()]).permute(0, 3, 1, 2), path)
    return path


def best_of(repeats, number, fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def test_the_reader_is_faster_than_torch_load_weights_only(tmp_path):
    """Both read the same official-layout map from memory (what a data-loader worker does per image); best of 5."""
    data = official_map(tmp_path / 'official.pt').read_bytes()
    ours = best_of(5, 300, lambda: _read_tensor(data, 'official.pt'))
    theirs = best_of(5, 300, lambda: torch.load(io.BytesIO(data), weights_only=True))
    whole = best_of(5, 300, lambda: load_label_map(str(tmp_path / 'official.pt'), num_classes=1000))
    print(f'\nlabel map (2, 5, 18, 18) fp16 from memory: this reader {ours * 1e6:.0f} us, '
          f'torch.load(weights_only=True) {theirs * 1e6:.0f} us ({theirs / ours:.1f}x); load_label_map with the file '
          f'read and the map validated: {whole * 1e6:.0f} us')
    assert ours < theirs


def test_a_packed_store_refuses_class_indices_out_of_range_as_it_reads_them(tmp_path):
    """A store whose maps.npy was edited after packing (packed.json still says max_class 9): class -1 used to train
    silently, class 12 of 10 to stop with an index error naming no file."""
    for i in range(3):
        save_label_map(str(tmp_path / 'labels' / f'a_{i}.pt'), torch.randn(5, 4, 4),
                       torch.arange(5.).view(5, 1, 1).expand(5, 4, 4) + i)
    pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), progress=False)
    np.testing.assert_array_equal(LabelMapStore(str(tmp_path / 'store'), 10).get('a_1'),
                                  load_label_map(str(tmp_path / 'labels' / 'a_1.pt')))
    maps = np.load(tmp_path / 'store' / 'maps.npy', mmap_mode='r+')
    maps[1, 1, 0, 0, 0], maps[2, 1, 0, 0, 0] = -1, 12
    maps.flush()
    del maps
    store = LabelMapStore(str(tmp_path / 'store'))
    with pytest.raises(LabelMapError, match=f"'a_1'.*in the store {tmp_path / 'store'} holds class indices -1..5"):
        store.get('a_1')
    store.get('a_2')  # no num_classes: only negative indices are refused
    with pytest.raises(LabelMapError, match="'a_2'.*holds class indices 2..12, out of range for num_classes=10"):
        LabelMapStore(str(tmp_path / 'store'), num_classes=10).get('a_2')


def test_every_tool_names_label_maps_in_its_unsafe_load_help():
    for name in ('train', 'test'):
        proc = subprocess.run([sys.executable, str(REPO / 'tools' / f'{name}.py'), '--help'], env=tool_env(),
                              capture_output=True, text=True)
        assert 'unpickle checkpoints and token label maps without the allow-list' in ' '.join(proc.stdout.split())
