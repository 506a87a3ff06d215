"""mmcv's compiled ops served from torchvision where mmcv has none (issue 42 item 1, mmvitreg/mmcv_ops.py).

With ``import mmvitreg`` on mmcv-lite, ``import mmcv.ops``, mmseg's and mmdet's models work; mmcv's own Python
(``RoIAlignFunction``, ``NMSop``) runs over the stand-in's ``nms`` / ``roi_align_forward`` / ``roi_align_backward``,
which equal the references written here (mmcv's bilinear-sampling RoIAlign and greedy NMS, spelled out) and
whose backward passes ``gradcheck``; any other op raises when called, with one line. Every check runs the
stand-in, also where a compiled ``mmcv._ext`` exists (the compiled tier: tests/test_mmcv_ops_compiled.py)."""

import importlib
import importlib.machinery
import importlib.util
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mmcv
import pytest
import torch
from conftest import CONFIGS, tool_env
from test_env_imports import hiding

from mmvitreg.mmcv_ops import PROVIDED, StandIn, backend, build_hint, not_provided, troubleshooting

HOST = (6, 5, 24, 20)  # N, C, H, W: 2 images of 5 channels


def stand_in_ext():
    """``mmcv._ext`` as :class:`StandIn` serves it, whatever this environment's ``mmcv._ext`` is."""
    module = importlib.util.module_from_spec(StandIn().find_spec('mmcv._ext'))
    module.__loader__.exec_module(module)
    return module


@pytest.fixture
def stand_in(monkeypatch):
    """mmcv's ``roi_align`` and ``nms`` Python over the stand-in's ops (imported after mmvitreg: on mmcv-lite only
    the stand-in lets ``mmcv.ops`` import)."""
    ext = stand_in_ext()
    for name in ('roi_align', 'nms'):
        monkeypatch.setattr(importlib.import_module(f'mmcv.ops.{name}'), 'ext_module', ext)
    return ext


def make_rois(dtype=torch.float64, device='cpu'):
    """(R, 5) RoIs ``(batch index, x1, y1, x2, y2)`` in image pixels (1 / spatial_scale of the map): inside, across
    the border, wholly outside, thinner than a bin (less than one pixel: mmcv's legacy ``aligned=False`` widens
    it to 1), on both images."""
    return torch.tensor(
        [
            [0, 3.2, 4.1, 30.5, 41.7],
            [1, -6.0, 10.3, 25.1, 60.0],
            [1, 0.0, 0.0, 79.0, 95.0],
            [0, 20.3, 20.6, 20.9, 21.0],
            [1, 70.0, 5.0, 110.0, 30.0],
            [0, 50.5, 7.25, 66.0, 90.5],
        ],
        dtype=dtype,
        device=device,
    )


def make_boxes(n=300, seed=0, dtype=torch.float32, device='cpu'):
    """``n`` boxes (n, 4) crowded in a 100x100 area (most overlap something) with distinct scores (n,)."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * 80
    boxes = torch.cat([xy, xy + 2 + torch.rand(n, 2, generator=g, dtype=torch.float64) * 25], 1)
    return boxes.to(dtype=dtype, device=device), torch.randperm(n, generator=g).to(dtype=dtype, device=device) / n


def roi_align_both_ways(ext, feats, rois, size, scale, ratio, aligned, grad_out):
    """``ext``'s ``roi_align_forward`` and ``roi_align_backward`` called as mmcv's ``RoIAlignFunction`` calls them
    (outputs allocated by the caller, settings by keyword): the pooled (R, C, h, w) and the gradient (N, C, H, W)
    for ``grad_out``."""
    settings = dict(
        aligned_height=size[0],
        aligned_width=size[1],
        spatial_scale=scale,
        sampling_ratio=ratio,
        pool_mode=1,
        aligned=aligned,
    )
    out, grad, empty = feats.new_zeros(len(rois), feats.shape[1], *size), torch.zeros_like(feats), feats.new_zeros(0)
    ext.roi_align_forward(feats, rois, out, empty, empty, **settings)
    ext.roi_align_backward(grad_out, rois, empty, empty, grad, **settings)
    return out, grad


@pytest.fixture
def tied_scores():
    """400 boxes (every box twice), 11 distinct scores."""
    boxes, _ = make_boxes(200)
    return torch.cat([boxes, boxes]), torch.rand(400, generator=torch.Generator().manual_seed(3)).round(decimals=1)


def bilinear(image, y, x):
    """mmcv's ``bilinear_interpolate`` of ``image`` (C, H, W) at ``(y, x)``: 0 beyond one pixel outside, else the
    border pixel clamps."""
    _, h, w = image.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return image.new_zeros(image.shape[0])
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    y0, y1, y = (h - 1, h - 1, float(h - 1)) if y0 >= h - 1 else (y0, y0 + 1, y)
    x0, x1, x = (w - 1, w - 1, float(w - 1)) if x0 >= w - 1 else (x0, x0 + 1, x)
    ly, lx = y - y0, x - x0
    return (
        (1 - ly) * (1 - lx) * image[:, y0, x0]
        + (1 - ly) * lx * image[:, y0, x1]
        + ly * (1 - lx) * image[:, y1, x0]
        + ly * lx * image[:, y1, x1]
    )


def reference_roi_align(feats, rois, size, spatial_scale, sampling_ratio, aligned):
    """RoIAlign (mean pooling) as mmcv's kernel computes it: each of the ``size`` (h, w) bins of a RoI (scaled,
    shifted by half a pixel when ``aligned``) is the mean of a grid of bilinear samples, ``sampling_ratio`` per side
    or ceil(bin side) when it is 0; (R, C, h, w)."""
    out = []
    for roi in rois.tolist():
        image = feats[int(roi[0])]
        x1, y1, x2, y2 = (v * spatial_scale - (0.5 if aligned else 0.0) for v in roi[1:])
        width, height = (x2 - x1, y2 - y1) if aligned else (max(x2 - x1, 1.0), max(y2 - y1, 1.0))
        bin_h, bin_w = height / size[0], width / size[1]
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(bin_h)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(bin_w)
        bins = [
            sum(
                bilinear(
                    image, y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h, x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                )
                for iy in range(grid_h)
                for ix in range(grid_w)
            )
            / max(grid_h * grid_w, 1)
            for ph in range(size[0])
            for pw in range(size[1])
        ]
        out.append(torch.stack(bins, 1).view(-1, *size))
    return torch.stack(out)


def reference_nms(boxes, scores, iou_threshold, offset, order=None):
    """Greedy NMS: in ``order`` (default: mmcv's kernels', ``scores.sort(0, descending=True)``, whose tied scores come
    in no fixed index order), keep a box unless its IoU (box sides ``x2 - x1 + offset``) with a kept one exceeds
    ``iou_threshold``; the kept indices in that order."""
    order = scores.sort(0, descending=True)[1].tolist() if order is None else order
    boxes = boxes.tolist()
    area = [(b[2] - b[0] + offset) * (b[3] - b[1] + offset) for b in boxes]
    keep = []
    for i in order:

        def iou(k):
            w = max(0.0, min(boxes[i][2], boxes[k][2]) - max(boxes[i][0], boxes[k][0]) + offset)
            h = max(0.0, min(boxes[i][3], boxes[k][3]) - max(boxes[i][1], boxes[k][1]) + offset)
            return w * h / (area[i] + area[k] - w * h)

        if all(iou(k) <= iou_threshold for k in keep):
            keep.append(i)
    return keep


# (output size, spatial scale, sampling ratio, aligned): mmdet's 7x7 / 14x14 (sampling 0, aligned) and mask-target
# 28x28 (scale 1) among them, and the legacy aligned=False; non-square outputs catch a swapped height and width
ROI_CASES = [
    ((7, 7), 0.25, 0, True),
    ((3, 4), 0.25, 0, False),
    ((3, 4), 0.5, 2, True),
    ((2, 3), 0.125, 3, False),
    ((4, 2), 0.25, 1, True),
]


@pytest.mark.parametrize('size, scale, ratio, aligned', ROI_CASES)
def test_roi_align_forward_is_mmcvs_bilinear_sampling(stand_in, size, scale, ratio, aligned):
    torch.manual_seed(0)
    feats = torch.randn(*HOST, dtype=torch.float64)
    out = mmcv.ops.RoIAlign(size, scale, ratio, 'avg', aligned)(feats, make_rois())
    torch.testing.assert_close(
        out, reference_roi_align(feats, make_rois(), size, scale, ratio, aligned), rtol=1e-12, atol=1e-12
    )


def test_mask_target_roi_align_on_binary_masks_is_the_reference(stand_in):
    """mmdet's mask targets: ``mmcv.ops.roi_align`` of (n, 1, H, W) masks over one RoI each, 28x28, scale 1."""
    masks = (torch.rand(3, 1, 40, 50, generator=torch.Generator().manual_seed(1)) > 0.5).float()
    rois = torch.tensor([[0, 2.5, 3.0, 30.0, 38.5], [1, 0.0, 0.0, 50.0, 40.0], [2, 10.2, 4.4, 18.9, 9.1]])
    out = mmcv.ops.roi_align(masks, rois, (28, 28), 1.0, 0, 'avg', True)
    torch.testing.assert_close(
        out, reference_roi_align(masks, rois, (28, 28), 1.0, 0, True).float(), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize('size, scale, ratio, aligned', ROI_CASES[1:])
def test_roi_align_backward_is_the_gradient_of_the_forward(stand_in, size, scale, ratio, aligned):
    """mmcv's ``RoIAlignFunction.backward`` (the stand-in's ``roi_align_backward``) passes gradcheck in float64
    (fast mode: the Jacobian against random directions), and equals autograd through the reference."""
    torch.manual_seed(0)
    feats = torch.randn(*HOST, dtype=torch.float64, requires_grad=True)
    rois = make_rois()
    layer = mmcv.ops.RoIAlign(size, scale, ratio, 'avg', aligned)
    assert torch.autograd.gradcheck(lambda x: layer(x, rois), (feats,), eps=1e-6, atol=1e-8, fast_mode=True)
    grad_out = torch.randn(len(rois), HOST[1], *size, dtype=torch.float64)
    (ours,) = torch.autograd.grad(layer(feats, rois), feats, grad_out)
    (ref,) = torch.autograd.grad(reference_roi_align(feats, rois, size, scale, ratio, aligned), feats, grad_out)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)


def test_roi_align_backward_adds_to_the_gradient_it_is_given():
    """As mmcv's kernel (atomicAdd into ``grad_input``): the gradient is added to what the tensor holds."""
    ext = stand_in_ext()
    feats, rois = torch.randn(HOST, dtype=torch.float64), make_rois()
    grad_out = torch.randn(len(rois), HOST[1], 3, 4, dtype=torch.float64)
    _, grad = roi_align_both_ways(ext, feats, rois, (3, 4), 0.25, 0, True, grad_out)
    added = feats.clone()
    ext.roi_align_backward(
        grad_out,
        rois,
        feats[:0],
        feats[:0],
        added,
        aligned_height=3,
        aligned_width=4,
        spatial_scale=0.25,
        sampling_ratio=0,
        pool_mode=1,
        aligned=True,
    )
    assert grad.abs().sum() > 0
    torch.testing.assert_close(added, feats + grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize('offset', [0, 1])
@pytest.mark.parametrize('iou_threshold', [0.3, 0.7])
def test_nms_is_greedy_nms_by_decreasing_score(stand_in, offset, iou_threshold):
    boxes, scores = make_boxes()
    dets, keep = mmcv.ops.nms(boxes, scores, iou_threshold, offset=offset)
    assert keep.dtype == torch.int64 and keep.tolist() == reference_nms(boxes, scores, iou_threshold, offset)
    assert 10 < len(keep) < len(boxes)
    torch.testing.assert_close(dets, torch.cat([boxes[keep], scores[keep, None]], 1))


def test_nms_offset_1_counts_the_last_pixel():
    """Two 10-pixel-wide boxes 5 apart: IoU 5/15 with sides x2 - x1, 6/16 with x2 - x1 + 1 (mmcv's offset 1)."""
    ext = stand_in_ext()
    boxes, scores = torch.tensor([[0.0, 0.0, 10.0, 10.0], [5.0, 0.0, 15.0, 10.0]]), torch.tensor([0.9, 0.8])
    assert ext.nms(boxes, scores, iou_threshold=0.35, offset=0).tolist() == [0, 1]
    assert ext.nms(boxes, scores, iou_threshold=0.35, offset=1).tolist() == [0]


def test_nms_takes_tied_scores_in_mmcvs_order_and_nothing_is_empty(tied_scores):
    """Equal scores are taken in the order of mmcv's sort, which is not the index order torchvision's stable sort
    would give (here the two keep different boxes); no boxes: no indices."""
    boxes, scores = tied_scores
    keep = stand_in_ext().nms(boxes, scores, iou_threshold=0.5, offset=0)
    assert keep.tolist() == reference_nms(boxes, scores, 0.5, 0)
    by_index = sorted(range(len(scores)), key=lambda i: -scores[i])
    assert keep.tolist() != reference_nms(boxes, scores, 0.5, 0, by_index)
    assert stand_in_ext().nms(boxes[:0], scores[:0], iou_threshold=0.5, offset=0).shape == (0,)


def test_mmdets_batched_nms_runs_per_class(stand_in):
    """mmcv's ``batched_nms`` (mmdet's RPN and per-class ``multiclass_nms``): boxes of different classes never
    suppress each other."""
    boxes, scores = make_boxes(120)
    classes = torch.arange(120) % 3
    dets, keep = mmcv.ops.batched_nms(boxes, scores, classes, dict(type='nms', iou_threshold=0.5))
    expected = sorted(
        (
            i
            for c in range(3)
            for i in (classes == c)
            .nonzero()[:, 0][reference_nms(boxes[classes == c], scores[classes == c], 0.5, 0)]
            .tolist()
        ),
        key=lambda i: -scores[i],
    )
    assert keep.tolist() == expected


def test_an_op_it_does_not_provide_raises_when_called_with_one_line(stand_in):
    ext = stand_in
    assert hasattr(ext, 'deform_conv_forward') and not hasattr(ext, '__path__')
    with pytest.raises(NotImplementedError) as caught:
        ext.deform_conv_forward(torch.zeros(1))
    assert str(caught.value) == not_provided('deform_conv_forward')
    with pytest.raises(NotImplementedError) as caught:
        mmcv.ops.RoIAlign(2, 1.0, 0, 'max')(torch.zeros(1, 1, 4, 4), torch.zeros(1, 5))
    assert str(caught.value) == not_provided("roi_align_forward with pool_mode='max'")


def test_the_missing_op_line_points_to_the_catalogue_the_installed_package_holds():
    """The build's C++20 caveat is a command printing the catalogue's case: a file under ``mmvitreg/.mim`` (the
    wheel's copy of tools/; a wheel has no docs/)."""
    command = troubleshooting('op-not-served')
    assert build_hint().endswith(f'(a torch whose headers need C++20: {command})')
    python, script, case = command.split()
    assert Path(script).is_file() and f'mmvitreg{os.sep}.mim{os.sep}tools' in script
    proc = subprocess.run([sys.executable, script, case], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith('op-not-served: ') and '-std=c++17' in proc.stdout


def test_nms_with_scores_of_another_shape_blames_the_scores(stand_in):
    """``nms(boxes, scores[:, None])``: one line naming the scores' shape and the one expected (the boxes are
    fine); boxes of another shape are named as such."""
    boxes, scores = make_boxes(5)
    with pytest.raises(ValueError, match=r'^nms: scores must be \(N,\) = \(5,\) for boxes \(5, 4\), got \(5, 1\)$'):
        mmcv.ops.nms(boxes, scores[:, None], 0.5)
    with pytest.raises(ValueError, match=r'^nms: boxes must be \(N, 4\), got \(5, 1, 4\)$'):
        stand_in.nms(boxes[:, None], scores, iou_threshold=0.5, offset=0)


def test_the_missing_op_line_names_the_op_and_a_pip_command_building_mmcv_here():
    line = not_provided('nms_rotated')
    assert '\n' not in line and line.startswith("mmcv._ext.nms_rotated is not provided by mmvitreg's stand-in")
    assert ', '.join(PROVIDED) in line and 'setup_env.sh' not in line
    assert line.endswith(build_hint()) and f'"mmcv=={mmcv.__version__}"' in build_hint()
    assert build_hint().startswith(
        'pip uninstall -y mmcv-lite && pip install "setuptools<82" && MMCV_WITH_OPS=1 '
        'pip install --no-build-isolation --no-binary mmcv'
    )


def run_hidden(tmp_path, code):
    """``code`` in a fresh interpreter where no compiled ``mmcv._ext`` can be found (as on mmcv-lite)."""
    env = tool_env()
    env['PYTHONPATH'] = os.pathsep.join([str(hiding(tmp_path / 'site', 'mmcv._ext')), env['PYTHONPATH']])
    return subprocess.run(
        [sys.executable, '-c', textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300
    )


def test_mmcv_ops_mmseg_and_mmdet_models_import_with_mmvitreg_and_not_without(tmp_path):
    """Without a compiled ``mmcv._ext``: ``import mmcv.ops`` fails as on mmcv-lite, and works after ``import
    mmvitreg`` with mmseg's and mmdet's models; mmcv's own Python runs over the stand-in (an unprovided op raises
    its line through ``mmcv.ops``)."""
    proc = run_hidden(
        tmp_path,
        '''
        try:
            import mmcv.ops
        except ModuleNotFoundError as e:
            print('without:', e)
        import mmvitreg
        import mmcv.ops, mmseg.models, mmdet.models, torch
        from mmvitreg.mmcv_ops import StandIn, backend
        import mmcv._ext
        print('served:', isinstance(mmcv._ext.__loader__, StandIn))
        print(backend())
        try:
            mmcv.ops.sigmoid_focal_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), 2.0, 0.25)
        except NotImplementedError as e:
            print('focal:', e)
    ''',
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0] == "without: No module named 'mmcv._ext'" and out[1] == 'served: True'
    assert out[2].startswith('mmcv ops: torchvision ') and 'mmvitreg/mmcv_ops.py' in out[2]
    assert out[3] == 'focal: ' + not_provided('sigmoid_focal_loss_forward')


def test_a_dense_run_logs_which_backend_serves_mmcvs_ops(tmp_path, capsys):
    """``build_runner`` (every tool's) logs :func:`backend` for an mmseg or mmdet config: the compiled ops where
    mmcv has them, else the stand-in."""
    from mmvitreg.utils import build_runner, load_config

    cfg = load_config(str(CONFIGS / 'demo' / 'upernet_swin-nano_1xb8-300_digits-ade20k-128x128.py'))
    cfg.work_dir, cfg.visualizer.name = str(tmp_path), 'backend_line'
    capsys.readouterr()
    build_runner(cfg)
    assert backend() in capsys.readouterr().out
    compiled = importlib.machinery.PathFinder.find_spec('mmcv._ext', mmcv.__path__) is not None
    assert ("mmcv's compiled ops" if compiled else 'mmvitreg/mmcv_ops.py') in backend()
