"""The packed label-map store: the same maps as the .pt folder it was packed from, errors that name
the file, and a loader that survives being pickled into data-loader workers."""

import importlib.util
import json
import os.path as osp
import pickle
import re

import numpy as np
import pytest
import torch
from mmengine.registry import init_default_scope
from mmpretrain.registry import TRANSFORMS

from mmvitreg.datasets.label_map_store import LabelMapStore, pack_label_maps
from mmvitreg.datasets.label_maps import save_label_map

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
IMAGES = ['n01/a_1.JPEG', 'n01/a_2.JPEG', 'n02/b_1.JPEG', 'n02/sub/é_3.png', 'top.jpg']


def write_maps(label_root, names=IMAGES, shape=(3, 4, 5), seed=0):
    """One map per image: ``.npy`` (the generator's format) and ``.pt`` (the official one) alternately."""
    gen = torch.Generator().manual_seed(seed)
    for i, name in enumerate(names):
        logits = torch.randn(shape, generator=gen).sort(0, descending=True).values
        classes = torch.randperm(40, generator=gen)[: shape[0], None, None].expand(shape).float()
        save_label_map(osp.join(label_root, osp.splitext(name)[0] + ('.npy', '.pt')[i % 2]), logits, classes)


def loader(label_root, **kwargs):
    init_default_scope('mmpretrain')
    return TRANSFORMS.build(
        dict(type='mmvitreg.LoadTokenLabelMap', label_root=str(label_root), img_prefix='/data/train', **kwargs)
    )


def load(transform, name):
    results = transform(dict(img=np.zeros((6, 8, 3), np.uint8), img_path=f'/data/train/{name}'))
    return results['token_label_map'].label_map


def test_store_gives_the_maps_of_the_folder(tmp_path):
    write_maps(tmp_path / 'labels')
    meta = pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), num_classes=40, progress=False)
    assert meta['count'] == len(IMAGES) and meta['map_shape'] == [2, 3, 4, 5] and meta['dtype'] == 'float16'
    assert json.loads((tmp_path / 'store' / 'packed.json').read_text()) == meta
    from_files, from_store = loader(tmp_path / 'labels'), loader(tmp_path / 'store', num_classes=40)
    assert from_files.store is None and from_store.store is not None
    maxima = []
    for name in IMAGES:
        expected = load(from_files, name)
        got = load(from_store, name)
        assert got.dtype == np.float16 and got.flags.writeable
        np.testing.assert_array_equal(got, expected)
        maxima.append(expected[1].max())
    assert meta['max_class'] == max(maxima)
    # a data-loader worker gets a pickled copy: it opens its own memory maps
    worker = pickle.loads(pickle.dumps(from_store))
    assert worker.store._maps is None
    np.testing.assert_array_equal(load(worker, IMAGES[2]), load(from_files, IMAGES[2]))


def test_image_missing_from_the_store_names_image_and_store(tmp_path):
    write_maps(tmp_path / 'labels', IMAGES[:2])
    pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), progress=False)
    transform = loader(tmp_path / 'store')
    for name in ('n01/a_0.JPEG', 'n01/a_3.JPEG', 'zzz/c.JPEG'):  # before, between and after the keys
        with pytest.raises(
            LookupError, match=re.escape(f'/data/train/{name}') + '.*' + re.escape(str(tmp_path / 'store'))
        ):
            load(transform, name)


def test_packing_a_malformed_map_names_it_and_leaves_nothing(tmp_path):
    write_maps(tmp_path / 'labels')
    bad = tmp_path / 'labels' / 'n02' / 'b_1.npy'
    np.save(bad, np.zeros((3, 3, 4, 5), np.float16))
    with pytest.raises(ValueError, match=re.escape(f'malformed token label map {bad}')):
        pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['labels']  # no store, no temporary folder


def test_packing_refuses_mixed_shapes_and_out_of_range_classes(tmp_path):
    write_maps(tmp_path / 'labels', IMAGES[:3])
    write_maps(tmp_path / 'labels', ['n03/odd.JPEG'], shape=(3, 6, 6))
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / 'labels' / 'n03' / 'odd.npy')) + '.*its shape'):
        pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), progress=False)
    (tmp_path / 'labels' / 'n03' / 'odd.npy').unlink()
    with pytest.raises(ValueError, match='out of range for num_classes=10'):
        pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), num_classes=10, progress=False)
    pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), progress=False)
    with pytest.raises(FileExistsError, match='already exists'):
        pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), progress=False)
    # the loader checks each map's classes as it reads it from the store
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{tmp_path / 'store' / 'maps.npy'}['n01/a_1'] (of /data/train/n01/a_1.JPEG): its class indices"
        ),
    ):
        load(loader(tmp_path / 'store', num_classes=2), IMAGES[0])
    with pytest.raises(ValueError, match=r'holds maps of \(2, 3, 4, 5\), not \(2, k, h, w\) = \(2, 3, 4, 4\)'):
        loader(tmp_path / 'store', map_shape=(3, 4, 4))


def test_inconsistent_store_is_an_error(tmp_path):
    write_maps(tmp_path / 'labels')
    pack_label_maps(str(tmp_path / 'labels'), str(tmp_path / 'store'), progress=False)
    np.save(tmp_path / 'store' / 'keys.npy', np.array([b'n01/a_1']))
    with pytest.raises(ValueError, match='inconsistent.*pack the store again'):
        LabelMapStore(str(tmp_path / 'store')).get('n01/a_1')
    (tmp_path / 'store' / 'packed.json').write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match='is not a version-1 mmvitreg.label_maps store'):
        LabelMapStore(str(tmp_path / 'store'))


def test_pack_tool(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location(
        'pack_label_maps', osp.join(ROOT, 'tools', 'dataset_converters', 'pack_label_maps.py')
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    write_maps(tmp_path / 'labels')
    tool.main([str(tmp_path / 'labels'), str(tmp_path / 'store')])
    assert f'packed {len(IMAGES)} label maps of (2, 3, 4, 5) float16' in capsys.readouterr().out
    with pytest.raises(SystemExit, match='error: .*already exists'):
        tool.main([str(tmp_path / 'labels'), str(tmp_path / 'store')])
