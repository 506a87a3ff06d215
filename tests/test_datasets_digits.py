"""The bundled digits sets: written in the real ImageNet / ADE20K / Cityscapes / COCO layouts and read
by the real dataset classes, pipelines and metrics of mmpretrain, mmseg and mmdet."""

import filecmp
import json
import runpy
from pathlib import Path

import cv2
import digits
import numpy as np
import pytest
import torch
from digits import DIGIT_CLASSES, SEG_CLASSES, SEG_PALETTE
from mmengine.config import Config
from mmengine.registry import init_default_scope

CONFIGS = Path(__file__).resolve().parents[1] / 'configs' / '_base_' / 'datasets'
SMALL = dict(
    imagenet=dict(num_train=40, num_val=20),
    ade20k=dict(num_train=3, num_val=2),
    cityscapes=dict(num_train=3, num_val=2),
    coco=dict(num_train=3, num_val=4),
)


@pytest.fixture(scope='module')
def sets(tmp_path_factory):
    """The four layouts, built once with small counts: ``{layout: (root, summary)}``."""
    root = tmp_path_factory.mktemp('digits')
    return {name: (root / name, digits.BUILDERS[name](root / name, **SMALL[name])) for name in SMALL}


def drawn(layout, split, **params):
    """The canvases the builder composed, redrawn from the same seed: ``[(image, [(d, mask)])]``."""
    spec = dict(ade20k=((128, 128), (2, 5), 1), cityscapes=((128, 256), (3, 8), 1), coco=((128, 128), (2, 5), 0))
    size, per_image, band = spec[layout]
    canvas = digits._CanvasSpec(0, params['num_train'], params['num_val'], size, per_image, (20, 48), band)
    return list(canvas.draw(layout, split))


def expected_label_map(canvas_digits, shape, background, band_id):
    """Reference: background, band of 1 pixel (3x3 cross) around each digit, digit ``d`` on its pixels."""
    label = np.full(shape, background, dtype=np.int64)
    cross = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]], np.uint8)
    for _, mask in canvas_digits:
        label[cv2.dilate(mask.astype(np.uint8), cross) > 0] = band_id
    for d, mask in canvas_digits:
        label[mask] = background + 1 + d
    return label


def test_split_is_disjoint_and_seeded():
    """Train/val split by scan index: disjoint, covering all 1797 scans, a function of the seed."""
    train, val = digits.split_digits(0)
    assert len(val) == 297 and len(train) == 1500
    assert not set(train) & set(val) and len(set(train) | set(val)) == 1797
    assert np.array_equal(val, digits.split_digits(0)[1])
    assert not np.array_equal(val, digits.split_digits(1)[1])
    with pytest.raises(ValueError, match='num_val'):
        digits.split_digits(0, num_val=1797)


def test_imagenet_layout_read_by_custom_dataset(sets):
    """ImageNet layout: CustomDataset reads it in folder mode and in ann-file mode alike, the labels
    are the scans' labels, the images are the upscaled scans, train and val scans are disjoint."""
    from mmcv.transforms import LoadImageFromFile
    from mmpretrain.datasets import CustomDataset
    from mmpretrain.datasets.transforms import PackInputs

    root, summary = sets['imagenet']
    assert summary['images'] == dict(train=40, val=20) and summary['classes'] == list(DIGIT_CLASSES)
    scans, labels = digits.load_digit_scans()
    pipeline = [LoadImageFromFile(), PackInputs()]
    seen = {}
    for split in ('train', 'val'):
        folder = CustomDataset(data_root=str(root), data_prefix=split, pipeline=pipeline)
        annotated = CustomDataset(
            data_root=str(root),
            data_prefix=split,
            ann_file=f'meta/{split}.txt',
            metainfo=dict(classes=DIGIT_CLASSES),
            pipeline=pipeline,
        )
        assert len(folder) == len(annotated) == summary['images'][split]
        assert folder.metainfo['classes'] == annotated.metainfo['classes'] == DIGIT_CLASSES
        by_path = {info['img_path']: info['gt_label'] for info in folder.load_data_list()}
        assert by_path == {info['img_path']: info['gt_label'] for info in annotated.load_data_list()}
        seen[split] = {int(Path(p).stem.rsplit('_', 1)[1]) for p in by_path}
        for path, label in by_path.items():
            assert labels[int(Path(path).stem.rsplit('_', 1)[1])] == label
        sample = annotated[0]
        assert sample['inputs'].shape == (3, 32, 32) and sample['inputs'].dtype == torch.uint8
        index = int(Path(sample['data_samples'].img_path).stem.rsplit('_', 1)[1])
        assert int(sample['data_samples'].gt_label) == labels[index]
        rendered = 255 * (1 - digits.upscale_scan(scans[index], 32))
        assert np.abs(sample['inputs'][0].numpy() - rendered).mean() < 2  # JPEG q95 keeps the scan
    assert not seen['train'] & seen['val']


def test_ade20k_layout_reduce_zero_label(sets):
    """ADE20K layout: ids 1..11 on disk with 0 in a band around each digit; ADE20KDataset's
    reduce_zero_label turns the band into 255 (ignored) and 1..11 into classes 0..10, and every pixel
    of a composited digit ``d`` carries class ``d + 1`` ('digit_d' of SEG_CLASSES)."""
    from mmcv.transforms import LoadImageFromFile
    from mmseg.datasets import ADE20KDataset, BaseSegDataset
    from mmseg.datasets.transforms import LoadAnnotations, PackSegInputs

    root, summary = sets['ade20k']
    pipeline = [LoadImageFromFile(), LoadAnnotations(), PackSegInputs()]
    prefix = dict(img_path='images/validation', seg_map_path='annotations/validation')
    ade = ADE20KDataset(data_root=str(root), data_prefix=prefix, pipeline=pipeline)
    assert len(ade) == summary['images']['val'] == 2
    raw = cv2.imread(str(root / 'annotations/validation/ADE_val_00000001.png'), cv2.IMREAD_UNCHANGED)
    assert raw.ndim == 2 and {0, 1} <= set(np.unique(raw)) <= set(range(12))
    canvases = drawn('ade20k', 'val', **SMALL['ade20k'])
    for k, (image, canvas_digits) in enumerate(canvases):
        gt = ade[k]['data_samples'].gt_sem_seg.data[0].numpy()
        assert set(np.unique(gt)) <= set(range(11)) | {255} and 255 in gt and 0 in gt
        assert np.array_equal(gt, expected_label_map(canvas_digits, gt.shape, 0, 255))
        ink = np.any([mask for _, mask in canvas_digits], axis=0)
        loaded = ade[k]['inputs'].numpy().mean(0)
        assert loaded[ink].mean() < loaded[gt == 0].mean() - 60  # the digits are drawn in dark ink
    # the real class refuses the digits class names, hence BaseSegDataset with ADE's settings in the config
    with pytest.raises(ValueError, match='not a subset'):
        ADE20KDataset(data_root=str(root), data_prefix=prefix, metainfo=dict(classes=SEG_CLASSES))
    named = BaseSegDataset(
        data_root=str(root),
        data_prefix=prefix,
        img_suffix='.jpg',
        seg_map_suffix='.png',
        reduce_zero_label=True,
        pipeline=pipeline,
        metainfo=dict(classes=SEG_CLASSES, palette=SEG_PALETTE),
    )
    assert named.metainfo['classes'] == SEG_CLASSES and named.metainfo['palette'] == SEG_PALETTE
    assert np.array_equal(named[1]['data_samples'].gt_sem_seg.data, ade[1]['data_samples'].gt_sem_seg.data)


def test_cityscapes_layout_train_ids(sets):
    """Cityscapes layout: CityscapesDataset finds every image/labelTrainIds pair; trainIds 0..10,
    255 in the band around each digit, digit ``d`` on its pixels as trainId ``d + 1``."""
    from mmcv.transforms import LoadImageFromFile
    from mmseg.datasets import CityscapesDataset
    from mmseg.datasets.transforms import LoadAnnotations, PackSegInputs

    root, summary = sets['cityscapes']
    pipeline = [LoadImageFromFile(), LoadAnnotations(), PackSegInputs()]
    for split in ('train', 'val'):
        prefix = dict(img_path=f'leftImg8bit/{split}', seg_map_path=f'gtFine/{split}')
        city = CityscapesDataset(data_root=str(root), data_prefix=prefix, pipeline=pipeline)
        assert len(city) == summary['images'][split]
        paths = sorted(Path(info['img_path']).name for info in city.load_data_list())
        assert all(p.endswith('_000019_leftImg8bit.png') for p in paths)
    canvases = drawn('cityscapes', 'val', **SMALL['cityscapes'])
    val = CityscapesDataset(
        data_root=str(root), pipeline=pipeline, data_prefix=dict(img_path='leftImg8bit/val', seg_map_path='gtFine/val')
    )
    for k, (image, canvas_digits) in enumerate(canvases):
        sample = val[k]  # one validation city: files sort in canvas order
        gt = sample['data_samples'].gt_sem_seg.data[0].numpy()
        assert gt.shape == (128, 256) and set(np.unique(gt)) <= set(range(11)) | {255} and 255 in gt
        assert np.array_equal(gt, expected_label_map(canvas_digits, gt.shape, 0, 255))
        assert np.array_equal(sample['inputs'].numpy(), image[..., ::-1].transpose(2, 0, 1))  # lossless PNG


def test_coco_layout_masks_and_boxes_agree(sets):
    """COCO layout: CocoDataset loads every image and instance; each polygon mask is non-empty,
    enclosed by its bbox (tight), covers the composited digit, and has the digit's class."""
    from mmcv.transforms import LoadImageFromFile
    from mmdet.datasets import CocoDataset
    from mmdet.datasets.transforms import LoadAnnotations, PackDetInputs

    root, summary = sets['coco']
    pipeline = [LoadImageFromFile(), LoadAnnotations(with_bbox=True, with_mask=True), PackDetInputs()]
    coco = CocoDataset(
        data_root=str(root),
        ann_file='annotations/instances_val2017.json',
        data_prefix=dict(img='val2017/'),
        metainfo=dict(classes=DIGIT_CLASSES),
        pipeline=pipeline,
    )
    assert len(coco) == summary['images']['val'] == 4
    assert sum(len(info['instances']) for info in coco.load_data_list()) == summary['instances']['val']
    for k, (image, canvas_digits) in enumerate(drawn('coco', 'val', **SMALL['coco'])):
        sample = coco[k]['data_samples']
        assert sample.img_id == 1000001 + k
        masks = sample.gt_instances.masks.to_ndarray().astype(bool)
        boxes = sample.gt_instances.bboxes.tensor.numpy()
        assert len(masks) == len(canvas_digits) and len(masks) >= 2
        for mask, box, label, (d, ink) in zip(masks, boxes, sample.gt_instances.labels, canvas_digits):
            ys, xs = np.nonzero(mask)
            assert len(ys) > 0
            assert (box[0], box[1], box[2], box[3]) == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
            assert int(label) == d and mask[ink].all()


def test_coco_metric_scores_a_perfect_prediction_one(sets):
    """CocoMetric(bbox, segm) of the base config gives mAP 1.0 to predictions equal to the ground
    truth, and less when the classes are wrong."""
    from mmdet.registry import METRICS
    from pycocotools.coco import COCO

    root, _ = sets['coco']
    ann_file = str(root / 'annotations/instances_val2017.json')
    gt = COCO(ann_file)

    def evaluate(shift):
        init_default_scope('mmdet')
        cfg = Config.fromfile(str(CONFIGS / 'digits_coco.py'))
        metric = METRICS.build(dict(cfg.val_evaluator, ann_file=ann_file))
        metric.dataset_meta = dict(classes=DIGIT_CLASSES)
        for img_id in gt.getImgIds():
            anns = gt.loadAnns(gt.getAnnIds(imgIds=img_id))
            info = gt.loadImgs(img_id)[0]
            pred = dict(
                bboxes=torch.tensor(
                    [
                        [a['bbox'][0], a['bbox'][1], a['bbox'][0] + a['bbox'][2], a['bbox'][1] + a['bbox'][3]]
                        for a in anns
                    ]
                ),
                scores=torch.ones(len(anns)),
                labels=torch.tensor([(a['category_id'] - 1 + shift) % 10 for a in anns]),
                masks=torch.from_numpy(np.stack([gt.annToMask(a) for a in anns]).astype(bool)),
            )
            shape = (info['height'], info['width'])
            metric.process({}, [dict(img_id=img_id, ori_shape=shape, pred_instances=pred)])
        return metric.evaluate(len(gt.getImgIds()))

    perfect = evaluate(0)
    assert perfect['coco/bbox_mAP'] == pytest.approx(1.0) and perfect['coco/segm_mAP'] == pytest.approx(1.0)
    assert evaluate(1)['coco/bbox_mAP'] < 0.5


def test_builds_are_deterministic(sets, tmp_path):
    """Same seed and parameters: byte-identical files; another seed: other files."""
    for layout, (root, _) in sets.items():
        again = digits.BUILDERS[layout](tmp_path / layout, **SMALL[layout])
        assert not again['skipped']
        files = sorted(str(p.relative_to(root)) for p in root.rglob('*') if p.is_file())
        assert files == sorted(
            str(p.relative_to(tmp_path / layout)) for p in (tmp_path / layout).rglob('*') if p.is_file()
        )
        match, mismatch, errors = filecmp.cmpfiles(root, tmp_path / layout, files, shallow=False)
        assert match == files and not mismatch and not errors
        other = digits.BUILDERS[layout](tmp_path / f'{layout}_seed1', seed=1, **SMALL[layout])
        assert not other['skipped']
        match, mismatch, _ = filecmp.cmpfiles(root, tmp_path / f'{layout}_seed1', files, shallow=False)
        assert mismatch


def test_build_is_idempotent_and_safe(tmp_path, capsys):
    """A complete build is skipped, other parameters or force rebuild it, a foreign directory is
    refused; the command line tool writes data/digits_<layout> and says what it did."""
    params = dict(num_train=2, num_val=1)
    first = digits.build_coco(tmp_path / 'coco', **params)
    stamp = (tmp_path / 'coco/train2017/000000000001.jpg').stat().st_mtime_ns
    assert digits.build_coco(tmp_path / 'coco', **params)['skipped']
    assert (tmp_path / 'coco/train2017/000000000001.jpg').stat().st_mtime_ns == stamp
    assert not digits.build_coco(tmp_path / 'coco', force=True, **params)['skipped']
    assert digits.build_coco(tmp_path / 'coco', num_train=3, num_val=1)['images'] == dict(train=3, val=1)
    summary = json.loads((tmp_path / 'coco' / digits.SUMMARY_FILE).read_text())
    assert summary['complete'] and summary['params']['num_train'] == 3 and first['params']['num_train'] == 2
    (tmp_path / 'mine').mkdir()
    (tmp_path / 'mine' / 'notes.txt').write_text('keep me')
    with pytest.raises(FileExistsError, match='not a digits build'):
        digits.build_ade20k(tmp_path / 'mine', **params)
    with pytest.raises(ValueError, match='digit_size'):
        digits.build_ade20k(tmp_path / 'bad', digit_size=(20, 200), **params)

    tool = Path(__file__).resolve().parents[1] / 'tools' / 'dataset_converters' / 'digits.py'
    main = runpy.run_path(str(tool))['main']
    argv = ['cityscapes', '--out', str(tmp_path / 'data'), '--num-train', '2', '--num-val', '1', '--size', '64']
    main(argv)
    main(argv)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f'cityscapes: wrote {tmp_path / "data/digits_cityscapes"} (train 2, val 1 images')
    assert out[1].startswith('cityscapes: complete, skipped')
    image = next((tmp_path / 'data/digits_cityscapes/leftImg8bit/val').rglob('*.png'))
    assert cv2.imread(str(image)).shape == (64, 64, 3)


@pytest.mark.parametrize(
    'layout, scope, classes, length',
    [
        ('imagenet', 'mmpretrain', DIGIT_CLASSES, 40),
        ('ade20k', 'mmseg', SEG_CLASSES, 3),
        ('cityscapes', 'mmseg', SEG_CLASSES, 3),
        ('coco', 'mmdet', DIGIT_CLASSES, 3),
    ],
)
def test_base_configs_build_their_datasets(sets, layout, scope, classes, length):
    """configs/_base_/datasets/digits_<layout>.py: loads with Config.fromfile, holds the usual
    dataset keys, and its train / val datasets build from the library's registry under its scope and
    run their pipelines on the set; seg sets carry the palette and a multi-scale flip TTA pipeline."""
    import importlib

    cfg = Config.fromfile(str(CONFIGS / f'digits_{layout}.py'))
    assert {
        'dataset_type',
        'data_root',
        'train_dataloader',
        'val_dataloader',
        'test_dataloader',
        'val_evaluator',
        'test_evaluator',
    } <= set(cfg.keys())
    assert tuple(cfg.metainfo.classes) == classes and cfg.data_root.rstrip('/') == f'data/digits_{layout}'
    if layout == 'coco':
        assert [list(c) for c in cfg.metainfo.palette] == SEG_PALETTE[1:]
    init_default_scope(scope)
    registry = importlib.import_module(f'{scope}.registry').DATASETS
    root = sets[layout][0]
    for loader, size in (('train_dataloader', length), ('val_dataloader', SMALL[layout]['num_val'])):
        dataset = registry.build(dict(cfg[loader].dataset, data_root=str(root)))
        assert len(dataset) == size and tuple(dataset.metainfo['classes']) == classes
        assert dataset[0]['inputs'].shape[0] == 3
    if scope == 'mmseg':
        assert [list(c) for c in cfg.metainfo.palette] == SEG_PALETTE
        assert dataset.metainfo['palette'] == SEG_PALETTE
        assert dataset.metainfo['reduce_zero_label'] == (layout == 'ade20k')
        tta_cfg = dict(cfg.val_dataloader.dataset, data_root=str(root), pipeline=cfg.tta_pipeline)
        tta = registry.build(tta_cfg)
        assert len(tta[0]['inputs']) == 2 * len(cfg.img_ratios)
