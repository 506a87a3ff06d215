"""Dense label maps for token labeling (Jiang et al. 2021, §3.2, Eq. 6; §4.2 "Token labeling").

The central test builds a map whose class encodes its (row, col) position in the original image and an
image whose pixels encode the same position, runs crop + flip + rotate/shear/translate, and checks that
every token's target is the class of the image content under that token. The image is not square and
the crop is off the diagonal, so a transposed (x, y) reading of the map, which the official code is
suspected of, would fail.
"""

import re

import numpy as np
import pytest
import torch
from mmengine.registry import init_default_scope
from mmpretrain.registry import TRANSFORMS

from mmvitreg.datasets.label_maps import LabelMapError, TokenLabelMap, label_map_path, load_label_map, save_label_map
from mmvitreg.datasets.token_label_target import TokenLabelTarget, token_label_targets
from mmvitreg.models.data_preprocessors import TokenClsDataPreprocessor

BINS = 8  # position classes: class = BINS * row_bin + col_bin
H0, W0 = 120, 200  # non-square original image
OUT = 112  # crop output side
S = 14  # token grid


def position_map(h, w, region, k=3):
    """(k, h, w) logits and classes; top-1 class = the position bin of the cell centre."""
    i, j = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing='ij')
    if region == 'full':
        y, x = i * H0 / h, j * W0 / w
    else:
        side = min(H0, W0)
        y, x = (H0 - side) / 2 + i * side / h, (W0 - side) / 2 + j * side / w
    top = BINS * np.floor(y * BINS / H0) + np.floor(x * BINS / W0)
    classes = np.stack([(top + c * 17) % (BINS * BINS) for c in range(k)])
    logits = np.stack([np.full((h, w), 10.0 - 5 * c) for c in range(k)])
    return torch.tensor(logits), torch.tensor(classes)


def position_image():
    """RGB image whose pixel (i, j) holds its row bin, col bin and 255 (= inside the image)."""
    i, j = np.meshgrid(np.arange(H0) + 0.5, np.arange(W0) + 0.5, indexing='ij')
    img = np.zeros((H0, W0, 3), np.uint8)
    img[..., 0] = np.floor(i * BINS / H0) * 16
    img[..., 1] = np.floor(j * BINS / W0) * 16
    img[..., 2] = 255
    return img


def expected_classes(img):
    """Per token: the position class of its pixels, or -1 where a token (with a 1-pixel ring) is not
    uniformly one in-image bin."""
    cell = OUT // S
    out = np.full((S, S), -1)
    for r in range(S):
        for c in range(S):
            patch = img[max(r * cell - 1, 0) : (r + 1) * cell + 1, max(c * cell - 1, 0) : (c + 1) * cell + 1]
            flat = patch.reshape(-1, 3)
            if (flat == flat[0]).all() and flat[0, 2] == 255:
                out[r, c] = BINS * (flat[0, 0] // 16) + flat[0, 1] // 16
    return out


SPATIAL_POLICIES = {
    'rotate': [dict(type='Rotate', magnitude_range=(0, 30), prob=1.0)],
    'shear': [
        dict(type='Shear', magnitude_range=(0, 0.3), prob=1.0, direction='horizontal', interpolation='nearest'),
        dict(type='Shear', magnitude_range=(0, 0.3), prob=1.0, direction='vertical', interpolation='nearest'),
    ],
    'translate': [
        dict(type='Translate', magnitude_range=(0, 0.3), prob=1.0, direction='horizontal'),
        dict(type='Translate', magnitude_range=(0, 0.3), prob=1.0, direction='vertical'),
    ],
}


def pipeline(tmp_path, policies, region='full', flip_direction='horizontal', **target_kwargs):
    init_default_scope('mmpretrain')
    cfgs = [
        dict(
            type='mmvitreg.LoadTokenLabelMap',
            label_root=str(tmp_path / 'labels'),
            img_prefix=str(tmp_path / 'images'),
            region=region,
        ),
        dict(
            type='mmvitreg.RandomResizedCropWithLabelMap',
            scale=OUT,
            crop_ratio_range=(0.15, 0.4),
            interpolation='nearest',
        ),
        dict(type='mmvitreg.RandomFlipWithLabelMap', prob=1.0, direction=flip_direction),
        dict(
            type='mmvitreg.RandAugmentWithLabelMap',
            policies=policies,
            num_policies=len(policies),
            magnitude_level=9,
            magnitude_std=0.5,
            hparams=dict(pad_val=0),
        ),
        dict(type='mmvitreg.TokenLabelTarget', token_label_size=S, topk=3, **target_kwargs),
        dict(type='PackInputs', algorithm_keys=['token_label_map']),
    ]
    return [TRANSFORMS.build(c) for c in cfgs]


def read_batch(packed):
    """The token labels the data preprocessor computes for a batch of packed samples."""
    data = TokenClsDataPreprocessor()(
        dict(inputs=[p['inputs'] for p in packed], data_samples=[p['data_samples'] for p in packed]), training=True
    )
    return [sample.token_label for sample in data['data_samples']]


def targets_of(transform, label_map, img_shape):
    """One sample's ``(2, topk, S, S)`` token label, packed by ``transform`` and read as a batch of one."""
    return token_label_targets([transform.pack(label_map, img_shape)])[0]


def run(transforms, tmp_path, img):
    results = dict(
        img=img.copy(),
        img_path=str(tmp_path / 'images' / 'cls' / 'a.png'),
        ori_shape=img.shape[:2],
        img_shape=img.shape[:2],
    )
    for t in transforms:
        results = t(results)
    return results


@pytest.mark.parametrize('region', ['full', 'center_square'])
@pytest.mark.parametrize('ops', sorted(SPATIAL_POLICIES))
def test_token_targets_follow_crop_flip_and_spatial_randaugment(tmp_path, region, ops):
    """§4.2: rotation, shear and translation (and crop and flip) move the score map with the image."""
    map_h, map_w = (24, 40) if region == 'full' else (30, 30)
    save_label_map(str(tmp_path / 'labels' / 'cls' / 'a.pt'), *position_map(map_h, map_w, region))
    transforms = pipeline(tmp_path, SPATIAL_POLICIES[ops], region)
    img = position_image()
    checked, classes_seen = 0, set()
    np.random.seed(0)
    packed = [run(transforms, tmp_path, img) for _ in range(6)]  # one batch of 6 random augmentations
    for sample, target in zip(packed, read_batch(packed)):
        # the pipeline's geometry, replayed on the position image: crop, flip, RandAugment ops
        out_img = sample['inputs'].permute(1, 2, 0).numpy()
        assert target.shape == (2, 3, S, S) and target.dtype == torch.float32
        expect = expected_classes(out_img)
        valid = expect >= 0
        if region == 'center_square':  # the map only covers the central square of the image
            valid &= (expect % BINS >= 2) & (expect % BINS <= 5)
        top1 = target[1, 0].numpy().astype(int)
        np.testing.assert_array_equal(top1[valid], expect[valid])
        checked += int(valid.sum())
        classes_seen |= set(expect[valid].tolist())
    assert checked > 200 and len(classes_seen) > 6


def test_transposed_map_reading_is_caught(tmp_path):
    """The check above can fail: reading the map with x and y swapped (the suspected official roi_align
    box order) gives wrong classes under an off-diagonal crop of a non-square image."""
    logits, classes = position_map(24, 40, 'full')
    save_label_map(str(tmp_path / 'labels' / 'cls' / 'a.pt'), logits, classes)
    transforms = pipeline(tmp_path, SPATIAL_POLICIES['rotate'])
    np.random.seed(0)
    results = dict(
        img=position_image(),
        img_path=str(tmp_path / 'images' / 'cls' / 'a.png'),
        ori_shape=(H0, W0),
        img_shape=(H0, W0),
    )
    for t in transforms[:4]:
        results = t(results)
    label_map = results['token_label_map']
    swap = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    # normalised (y, x) read as (x, y)
    label_map.affine = np.diag([W0 / H0, H0 / W0, 1.0]) @ swap @ label_map.affine
    target = targets_of(transforms[4], label_map, label_map.img_shape)
    expect = expected_classes(results['img'])
    valid = expect >= 0
    assert (target[1, 0].numpy().astype(int)[valid] != expect[valid]).mean() > 0.5


def identity_map(logits, classes, shape=(28, 28)):
    return TokenLabelMap(np.stack([logits, classes]).astype(np.float16), shape)


def test_paper_reading_softmax_over_stored_topk():
    """Default: a token's score is the teacher's softmax over the stored top-k logits (renormalised)."""
    logits = np.array([2.0, 1.0, 0.0])[:, None, None] * np.ones((3, 4, 4))
    classes = np.array([7.0, 3.0, 5.0])[:, None, None] * np.ones((3, 4, 4))
    label_map = identity_map(logits, classes)
    target = targets_of(TokenLabelTarget(token_label_size=2, topk=3), label_map, (28, 28))
    expect = np.exp([2.0, 1.0, 0.0]) / np.exp([2.0, 1.0, 0.0]).sum()
    np.testing.assert_allclose(target[0].permute(1, 2, 0).reshape(-1, 3).numpy(), np.tile(expect, (4, 1)), rtol=1e-6)
    assert (target[1].permute(1, 2, 0).reshape(-1, 3) == torch.tensor([7.0, 3.0, 5.0])).all()


def test_official_reading_softmax_over_all_classes():
    """reading='official': stored logits scattered into all C classes (0 elsewhere), softmax over C;
    the unlisted classes share the last (tail) slot's probability."""
    logits = np.array([2.0, 1.0, 0.0])[:, None, None] * np.ones((3, 4, 4))
    classes = np.array([7.0, 3.0, 5.0])[:, None, None] * np.ones((3, 4, 4))
    target = targets_of(
        TokenLabelTarget(token_label_size=2, reading='official', num_classes=10),
        identity_map(logits, classes),
        (28, 28),
    )
    z = np.exp([2.0, 1.0, 0.0]).sum() + 7
    assert target.shape == (2, 4, 2, 2)
    np.testing.assert_array_equal(target[1, :, 0, 0].numpy(), [3.0, 5.0, 7.0, -1.0])  # listed in class order
    np.testing.assert_allclose(target[0, :, 0, 0].numpy(), np.exp([1.0, 0.0, 2.0, 0.0]) / z, rtol=1e-6)
    with pytest.raises(ValueError, match='num_classes'):
        TokenLabelTarget(reading='official')
    with pytest.raises(ValueError, match='reading'):
        TokenLabelTarget(reading='dense')


def test_token_score_is_mean_over_its_region():
    """Eq. 6's y^i: one token over a map whose left half is class 1 and right half class 2 gets 1/2 each."""
    label_map = identity_map(np.zeros((1, 1, 2)), np.array([[[1.0, 2.0]]]), shape=(10, 20))
    target = targets_of(TokenLabelTarget(token_label_size=1, topk=2), label_map, (10, 20))
    np.testing.assert_allclose(target[0, :, 0, 0].numpy(), [0.5, 0.5])
    assert sorted(target[1, :, 0, 0].tolist()) == [1.0, 2.0]


def test_outside_the_image():
    """Tokens over the pad area (here: the image translated by its full width) carry no label (paper
    reading), or the fill logit for every class, i.e. a uniform distribution (official reading)."""
    logits = np.array([2.0, 1.0])[:, None, None] * np.ones((2, 4, 4))
    classes = np.array([1.0, 2.0])[:, None, None] * np.ones((2, 4, 4))
    label_map = identity_map(logits, classes)
    # x_in = x_out - 14: the left half of the output comes from outside the image
    label_map.compose(np.array([[1.0, 0.0, -14.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), (28, 28), (28, 28))
    paper = targets_of(TokenLabelTarget(token_label_size=2, topk=2), label_map, (28, 28))
    assert paper[0, :, :, 0].sum(0).tolist() == [0.0, 0.0]  # left column of tokens: outside
    np.testing.assert_allclose(paper[0, :, :, 1].sum(0).numpy(), [1.0, 1.0], rtol=1e-6)
    official = targets_of(TokenLabelTarget(token_label_size=2, reading='official', num_classes=4), label_map, (28, 28))
    assert (official[1, :, :, 0] == -1).all()  # left column: no class listed, each of the 4 has the tail
    np.testing.assert_allclose(official[0, -1, :, 0].numpy(), np.full(2, 0.25), rtol=1e-6)


def reference_scores(label_map, img_shape, s, n, num_classes):
    """An independent float64 reading, dense over all classes: ``(S * S, C)`` token scores (before the
    top-k) of Eq. 6 as the docstring of ``token_label_targets`` states it."""
    (h_img, w_img), side = img_shape, s * n
    centres = (np.arange(side) + 0.5) / side
    ys, xs = np.meshgrid(centres * h_img, centres * w_img, indexing='ij')
    points = np.stack([xs.ravel(), ys.ravel(), np.ones(side * side)])
    orig = label_map.affine @ points
    inside = (
        (orig[0] >= 0) & (orig[0] < label_map.ori_shape[1]) & (orig[1] >= 0) & (orig[1] < label_map.ori_shape[0])
    ).astype(float)
    logits, classes = label_map.label_map.astype(np.float64)
    k, h, w = logits.shape
    values = np.exp(logits) / np.exp(logits).sum(0)
    dense = np.zeros((h, w, num_classes))
    for c in range(k):
        np.put_along_axis(dense, classes[c][..., None].astype(int), values[c][..., None], 2)
    x, y = (label_map.map_matrix() @ points)[:2] - 0.5
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    read = 0.0
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        weight = (x - x0 if dx else 1 - x + x0) * (y - y0 if dy else 1 - y + y0)
        read = read + weight[:, None] * dense[np.clip(y0 + dy, 0, h - 1), np.clip(x0 + dx, 0, w - 1)]
    read = read.reshape(s, n, s, n, num_classes)
    inside = inside.reshape(s, n, s, n, 1)
    scores = (read * inside).sum((1, 3)) / np.maximum(inside.sum((1, 3)), 1)
    return scores.reshape(s * s, num_classes)


def random_label_map(rng, k, h, w, num_classes, region):
    """A random top-k map on a 120x200 image, seen through a random rotation, scale and shift that
    leave part of the output outside the image."""
    logits = -np.sort(-rng.normal(0.0, 2.0, (k, h, w)), 0)
    classes = np.stack([rng.choice(num_classes, k, replace=False) for _ in range(h * w)], 1).reshape(k, h, w)
    label_map = TokenLabelMap(np.stack([logits, classes]).astype(np.float16), (120, 200), region)
    angle, scale = rng.uniform(-0.6, 0.6), rng.uniform(0.3, 1.5)
    matrix = np.eye(3)
    matrix[:2, :2] = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    matrix[:2, 2] = rng.uniform(-30.0, 150.0, 2)
    label_map.compose(matrix, (120, 200), (56, 70))
    return label_map


@pytest.mark.parametrize('k,topk', [(4, 3), (2, 6)])
def test_batch_reading_equals_an_exact_dense_reference(k, topk):
    """Eq. 6 for a batch: the vectorised sparse (class, value) reading of token_label_targets equals a
    dense float64 per-sample reference on random maps and affines (out-of-image points, tokens fully
    outside, tokens reading fewer than topk classes: k=2, topk=6)."""
    rng = np.random.default_rng(k)
    num_classes, s, n = 12, 7, 2
    transform = TokenLabelTarget(token_label_size=s, topk=topk, samples_per_token=n)
    maps = [random_label_map(rng, k, 6, 9, num_classes, region) for region in ('full', 'center_square') * 3]
    targets = token_label_targets([transform.pack(m, (56, 70)) for m in maps])
    assert targets.shape == (6, 2, topk, s, s)
    outside_tokens = 0
    for label_map, target in zip(maps, targets):
        ref = reference_scores(label_map, (56, 70), s, n, num_classes)
        probs = target[0].flatten(1).t().double().numpy()  # (S * S, topk)
        index = target[1].flatten(1).t().long().numpy()
        expect = -np.sort(-ref, 1)[:, :topk]
        picked = np.take_along_axis(ref, index, 1)  # the reference's scores of the classes we chose
        expect = expect / np.maximum(expect.sum(1, keepdims=True), 1e-12)  # renormalised over the top-k
        picked = picked / np.maximum(picked.sum(1, keepdims=True), 1e-12)
        outside_tokens += int((ref.sum(1) == 0).sum())
        np.testing.assert_allclose(probs, expect, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(picked, probs, rtol=1e-4, atol=1e-6)
        assert all(len(set(row)) == topk for row in index.tolist())  # distinct classes per token
    assert outside_tokens > 0  # the case "no token label" is exercised


def test_missing_map_names_the_file(tmp_path):
    transform = TRANSFORMS.build(dict(type='mmvitreg.LoadTokenLabelMap', label_root=str(tmp_path)))
    results = dict(img=np.zeros((8, 8, 3), np.uint8), img_path='/data/train/n01/n01_7.JPEG')
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / 'n01' / 'n01_7.pt')) + ' does not exist'):
        transform(results)


@pytest.mark.parametrize(
    'content',
    [
        torch.zeros(3, 5, 4, 4),
        torch.zeros(2, 5, 4, 4, dtype=torch.int64),
        {'map': torch.zeros(2, 5, 4, 4)},
        torch.full((2, 5, 4, 4), -1.0),
    ],
)
def test_malformed_map_names_the_file(tmp_path, content):
    path = tmp_path / 'bad.pt'
    torch.save(content, path)
    with pytest.raises(ValueError, match=re.escape(f'malformed token label map {path}')):
        load_label_map(str(path))


def test_reads_official_format(tmp_path):
    """A map written exactly as the official generate_label.py does (top-5 of an (H, W, C) teacher
    output, stacked as [2, 5, H, W] fp16 at <root>/<class_dir>/<basename>.pt) loads unchanged."""
    output = torch.randn(14, 14, 1000)
    value, indices = output.topk(5)
    (tmp_path / 'n01440764').mkdir()
    torch.save(
        torch.stack([value.half(), indices.half()]).permute(0, 3, 1, 2), tmp_path / 'n01440764' / 'n01440764_10026.pt'
    )
    img_path = '/data/imagenet/train/n01440764/n01440764_10026.JPEG'
    assert label_map_path(str(tmp_path), img_path, suffix='.pt') == str(tmp_path / 'n01440764' / 'n01440764_10026.pt')
    init_default_scope('mmpretrain')
    load = TRANSFORMS.build(dict(type='mmvitreg.LoadTokenLabelMap', label_root=str(tmp_path), num_classes=1000))
    results = load(dict(img=np.zeros((224, 224, 3), np.uint8), img_path=img_path))
    assert results['token_label_map'].label_map.shape == (2, 5, 14, 14)
    official = torch.load(tmp_path / 'n01440764' / 'n01440764_10026.pt', weights_only=True)
    np.testing.assert_array_equal(results['token_label_map'].label_map, official.numpy())
    packed = TokenLabelTarget(token_label_size=14, topk=5)(results)['token_label_map']
    target = token_label_targets([packed])[0]
    # bilinear reading of a cell-aligned grid: each token's own cell carries the largest weight
    own = indices.permute(2, 0, 1)[0].float()
    assert (target[1, 0] == own).float().mean() > 0.6


def test_untracked_geometric_transform_is_refused(tmp_path):
    """A plain RandomResizedCrop after the loader would misalign the map: TokenLabelTarget refuses."""
    save_label_map(str(tmp_path / 'labels' / 'cls' / 'a.pt'), *position_map(24, 40, 'full'))
    transforms = pipeline(tmp_path, SPATIAL_POLICIES['rotate'])
    transforms.insert(1, TRANSFORMS.build(dict(type='RandomResizedCrop', scale=64)))
    with pytest.raises(RuntimeError, match='moved the image without the map'):
        run(transforms, tmp_path, position_image())


def test_randaugment_refuses_ops_it_cannot_follow():
    init_default_scope('mmpretrain')
    with pytest.raises(ValueError, match='cannot keep the label map aligned through RandomFlip'):
        TRANSFORMS.build(
            dict(
                type='mmvitreg.RandAugmentWithLabelMap',
                policies=[dict(type='RandomFlip', prob=0.5)],
                num_policies=1,
                magnitude_level=9,
            )
        )


def test_reads_legacy_torch_save_format(tmp_path):
    """Maps saved with torch's pre-1.6 (non-zip) serialization are read through torch.load."""
    label_map = torch.stack([torch.randn(5, 3, 4), torch.randint(0, 1000, (5, 3, 4)).float()]).half()
    torch.save(label_map, tmp_path / 'legacy.pt', _use_new_zipfile_serialization=False)
    np.testing.assert_array_equal(load_label_map(str(tmp_path / 'legacy.pt')), label_map.numpy())


class _RunsCode:
    """Unpickling it runs ``exec(code)``: what a malicious file does."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


@pytest.mark.parametrize('dtype', [torch.float16, torch.float32])
@pytest.mark.parametrize('layout', ['contiguous', 'strided', 'offset'])
def test_float_maps_of_every_layout_read_as_torch_reads_them(tmp_path, dtype, layout):
    """A float map (contiguous, a strided view as the official generator's permute saves, or a view into a
    larger storage) reads as a writable array equal to torch.load's."""
    label_map = torch.stack([torch.randn(5, 6, 4), torch.randint(0, 1000, (5, 6, 4)).float()]).to(dtype)
    saved = {
        'contiguous': label_map,
        'strided': label_map.permute(0, 1, 3, 2).contiguous().transpose(2, 3),
        'offset': torch.cat([torch.zeros(1, 5, 6, 4, dtype=dtype), label_map])[1:],
    }[layout]
    torch.save(saved, tmp_path / 'map.pt')
    read = load_label_map(str(tmp_path / 'map.pt'))
    assert read.dtype == saved.numpy().dtype and read.flags.writeable
    np.testing.assert_array_equal(read, torch.load(tmp_path / 'map.pt', weights_only=True).numpy())


def test_a_code_running_pickle_is_refused_by_torch_before_it_runs(tmp_path):
    """torch.load(weights_only=True) with no global added refuses exec; the one-line message names the file and
    the global, and nothing ran."""
    marker = tmp_path / 'ran'
    torch.save([torch.zeros(2, 5, 4, 4), _RunsCode(f'open({str(marker)!r}, "w").close()')], tmp_path / 'map.pt')
    with pytest.raises(
        LabelMapError,
        match=re.escape(f'malformed token label map {tmp_path / "map.pt"}: ') + '.*Unsupported global: GLOBAL exec',
    ) as e:
        load_label_map(str(tmp_path / 'map.pt'))
    assert '\n' not in str(e.value) and not marker.exists()


def test_generator_maps_are_npy_files_found_before_pt_ones(tmp_path):
    """save_label_map writes numpy's format for a .npy path (what the generator writes); the transform finds an
    image's .npy map before a .pt one of the same name, and falls back to the .pt."""
    logits, classes = torch.randn(5, 4, 4), torch.randint(0, 1000, (5, 4, 4)).float()
    npy = label_map_path(str(tmp_path), '/data/n01/a.JPEG', '/data')
    assert npy == str(tmp_path / 'n01' / 'a.npy')
    save_label_map(npy, logits, classes)
    assert np.load(npy, allow_pickle=False).shape == (2, 5, 4, 4)
    save_label_map(str(tmp_path / 'n01' / 'a.pt'), logits + 1, classes)
    save_label_map(str(tmp_path / 'n01' / 'b.pt'), logits + 2, classes)
    init_default_scope('mmpretrain')
    load = TRANSFORMS.build(
        dict(type='mmvitreg.LoadTokenLabelMap', label_root=str(tmp_path), img_prefix='/data', map_shape=(5, 4, 4))
    )
    for name, shift in (('a', 0), ('b', 2)):
        got = load(dict(img=np.zeros((8, 8, 3), np.uint8), img_path=f'/data/n01/{name}.JPEG'))
        np.testing.assert_array_equal(got['token_label_map'].label_map[0], (logits + shift).half().numpy())
