"""mmcv's compiled ops from torchvision's kernels where mmcv has none (mmcv-lite): ``mmcv._ext`` served from here.

mmcv-lite ships mmcv's Python ops (``mmcv/ops/*.py``) without the compiled ``mmcv._ext`` each loads at import
(``ext_loader.load_ext``), so ``import mmcv.ops``, and mmseg's and mmdet's models with it, fail. The finder
:class:`StandIn` (the top-level ``_mmvitreg_mmcv_ext``: the installed package's ``.pth`` puts it on
``sys.meta_path`` at interpreter start, ``import mmvitreg`` does too) goes last, so a compiled ``mmcv._ext`` is
always the one used; only where there is none is ``mmcv._ext`` a module of the ops below (:func:`serve`), called by
mmcv's own Python as it calls the compiled ones (outputs written into the tensors it passes). Every other name of
``_ext`` exists, for ``load_ext``, and raises when called: one line naming the op and :func:`build_hint`.

The ops the package's dense configs call: every mmseg and mmdet config of ``configs/`` (25 UperNet, 8 Cascade Mask
R-CNN) at tiny size through ``tools/train.py`` (one step of 2 images), ``tools/test.py`` and, for mmseg, ``--tta``,
on a stand-in that recorded each call. The UperNets call none. The Cascade Mask R-CNNs call three ops from four
sites, always with ``pool_mode`` 1 (mean), ``aligned=True``, ``sampling_ratio`` 0, ``offset`` 0; calls in the 8
training steps / the 8 tests (2 images each):

- ``nms`` <- mmcv's ``nms`` <- ``batched_nms`` <- mmdet's RPN ``_bbox_post_process``: 16 / 16, one per image;
- ``nms`` <- the same <- mmdet's ``multiclass_nms`` (the last stage's boxes): 0 / 16, one per image;
- ``roi_align_forward`` <- mmcv's ``RoIAlign`` <- mmdet's ``SingleRoIExtractor`` (boxes 7x7, masks 14x14): 69 /
  150, one per FPN level holding RoIs, per head and stage;
- ``roi_align_forward`` <- mmcv's ``roi_align`` <- mmdet's ``mask_target`` (``BitmapMasks.crop_and_resize``: binary
  masks, 28x28, scale 1): 48 / 0, one per image and stage;
- ``roi_align_backward`` <- ``RoIAlign``'s backward (the extractor's): 69 / 0.

``pool_mode='max'`` RoIAlign is not provided; ``aligned=False``, ``sampling_ratio`` > 0 and ``offset`` 1 are.
"""
import os.path as osp

import torch
from _mmvitreg_mmcv_ext import StandIn
from torch import Tensor

PROVIDED = ('nms', 'roi_align_forward', 'roi_align_backward')


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float, offset: int) -> Tensor:
    """mmcv's ``nms``: the indices (K,) int64 of the boxes (N, 4) ``(x1, y1, x2, y2)`` greedy NMS keeps, by
    decreasing score (N,) in the order of mmcv's kernels (``scores.sort(0, descending=True)``, not stable: tied
    scores as mmcv orders them, where torchvision's stable sort would not); a box goes when its IoU with a kept one
    is > ``iou_threshold``, sides ``x2 - x1 + offset`` (0 or 1)."""
    from torchvision.ops import nms as torchvision_nms
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f'nms: boxes must be (N, 4), got {tuple(boxes.shape)}')
    if scores.shape != boxes.shape[:1]:
        raise ValueError(f'nms: scores must be (N,) = ({len(boxes)},) for boxes {tuple(boxes.shape)}, got '
                         f'{tuple(scores.shape)}')
    order = scores.sort(0, descending=True)[1]
    boxes = boxes[order]
    if offset:  # the +1 of mmcv's legacy box sides, on every side and intersection alike
        boxes = torch.cat([boxes[:, :2], boxes[:, 2:] + offset], 1)
    return order[torchvision_nms(boxes, scores[order], iou_threshold)]


def _roi_align(input: Tensor, rois: Tensor, aligned_height: int, aligned_width: int, spatial_scale: float,
               sampling_ratio: int, pool_mode: int, aligned: bool) -> Tensor:
    """torchvision's RoIAlign of ``input`` (N, C, H, W) over ``rois`` (R, 5) ``(batch index, x1, y1, x2, y2)``:
    (R, C, aligned_height, aligned_width), each bin the mean of its bilinear samples (mmcv's ``pool_mode`` 1)."""
    from torchvision.ops import roi_align
    if pool_mode == 0:
        raise NotImplementedError(not_provided("roi_align_forward with pool_mode='max'"))
    return roi_align(input, rois, (aligned_height, aligned_width), spatial_scale, sampling_ratio, aligned)


def roi_align_forward(input: Tensor, rois: Tensor, output: Tensor, argmax_y: Tensor, argmax_x: Tensor,
                      **settings) -> None:
    """mmcv's ``roi_align_forward``: ``output`` (R, C, h, w) <- :func:`_roi_align` (``argmax_*``: 'max' only)."""
    output.copy_(_roi_align(input, rois, **settings))


def roi_align_backward(grad_output: Tensor, rois: Tensor, argmax_y: Tensor, argmax_x: Tensor, grad_input: Tensor,
                       **settings) -> None:
    """mmcv's ``roi_align_backward``: ``grad_input`` (N, C, H, W) += the gradient of :func:`_roi_align` for
    ``grad_output`` (R, C, h, w), by autograd through torchvision's op (linear in its input: any input serves)."""
    with torch.enable_grad():
        probe = grad_input.detach().requires_grad_()
        grad, = torch.autograd.grad(_roi_align(probe, rois, **settings), probe, grad_output)
    grad_input.add_(grad)


def troubleshooting(case: str) -> str:
    """The command printing ``case`` of the troubleshooting catalogue, which the installed package holds
    (``mmvitreg/.mim/tools/misc/troubleshooting.py``; docs/troubleshooting.md is generated from it)."""
    return f'python {osp.join(osp.dirname(__file__), ".mim", "tools", "misc", "troubleshooting.py")} {case}'


def build_hint() -> str:
    """How to build mmcv's compiled ops into the running environment (the installed mmcv's version; its setup.py
    needs ``pkg_resources``; ``--force-reinstall`` also rebuilds a compiled mmcv that does not load)."""
    import mmcv
    return (f'pip uninstall -y mmcv-lite && pip install "setuptools<82" && MMCV_WITH_OPS=1 pip install '
            f'--no-build-isolation --no-binary mmcv --no-deps --force-reinstall "mmcv=={mmcv.__version__}" '
            f"(a torch whose headers need C++20: {troubleshooting('op-not-served')})")


def not_provided(op: str) -> str:
    """The one line an op outside :data:`PROVIDED` raises."""
    return (f"mmcv._ext.{op} is not provided by mmvitreg's stand-in for mmcv's compiled ops (mmvitreg/mmcv_ops.py:"
            f" {', '.join(PROVIDED)}); build mmcv's ops in this environment: {build_hint()}")


def _unprovided(name: str):
    """The module ``__getattr__`` of the served ``mmcv._ext``: any op name is an op that raises when called."""
    if name.startswith('__'):
        raise AttributeError(name)

    def op(*args, **kwargs):
        raise NotImplementedError(not_provided(name))
    op.__name__ = name
    return op


def serve(module) -> None:
    """Fill the module ``mmcv._ext`` that :class:`StandIn` loads: :data:`PROVIDED`, and :func:`_unprovided` for
    every other name."""
    module.__dict__.update({name: globals()[name] for name in PROVIDED}, __getattr__=_unprovided)


def backend() -> str:
    """The one log line saying which code serves mmcv's ops here (imports ``mmcv._ext``)."""
    import mmcv._ext
    if isinstance(mmcv._ext.__loader__, StandIn):
        import torchvision
        return (f"mmcv ops: torchvision {torchvision.__version__}'s kernels through mmvitreg/mmcv_ops.py "
                f"({', '.join(PROVIDED)}; no compiled mmcv._ext here)")
    return f"mmcv ops: mmcv's compiled ops ({mmcv._ext.__file__})"
