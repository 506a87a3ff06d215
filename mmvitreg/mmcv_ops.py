"""mmcv's compiled ops from torchvision's kernels where mmcv has none (mmcv-lite): ``mmcv._ext`` served from here.

mmcv-lite lacks the compiled ``mmcv._ext`` that ``mmcv.ops`` (and mmseg's and mmdet's models) load. Where there is
none, the finder :class:`StandIn` (``_mmvitreg_mmcv_ext``) makes it a module of the ops below (:func:`serve`),
called by mmcv's Python as the compiled ones are (outputs written into the tensors it passes); any other op raises
when called, naming :func:`build_hint`. These are the ops mmdet's Cascade Mask R-CNN calls (the census:
docs/measurements/core.md); ``pool_mode='max'`` RoIAlign is not provided, ``aligned=False``,
``sampling_ratio`` > 0 and ``offset`` 1 are.
"""

import os.path as osp

import torch
from torch import Tensor

from _mmvitreg_mmcv_ext import StandIn

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
        raise ValueError(
            f'nms: scores must be (N,) = ({len(boxes)},) for boxes {tuple(boxes.shape)}, got {tuple(scores.shape)}'
        )
    order = scores.sort(0, descending=True)[1]
    boxes = boxes[order]
    if offset:  # the +1 of mmcv's legacy box sides, on every side and intersection alike
        boxes = torch.cat([boxes[:, :2], boxes[:, 2:] + offset], 1)
    return order[torchvision_nms(boxes, scores[order], iou_threshold)]


def _roi_align(
    input: Tensor,
    rois: Tensor,
    aligned_height: int,
    aligned_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    pool_mode: int,
    aligned: bool,
) -> Tensor:
    """torchvision's RoIAlign of ``input`` (N, C, H, W) over ``rois`` (R, 5) ``(batch index, x1, y1, x2, y2)``:
    (R, C, aligned_height, aligned_width), each bin the mean of its bilinear samples (mmcv's ``pool_mode`` 1)."""
    from torchvision.ops import roi_align

    if pool_mode == 0:
        raise NotImplementedError(not_provided("roi_align_forward with pool_mode='max'"))
    return roi_align(input, rois, (aligned_height, aligned_width), spatial_scale, sampling_ratio, aligned)


def roi_align_forward(
    input: Tensor, rois: Tensor, output: Tensor, argmax_y: Tensor, argmax_x: Tensor, **settings
) -> None:
    """mmcv's ``roi_align_forward``: ``output`` (R, C, h, w) <- :func:`_roi_align` (``argmax_*``: 'max' only)."""
    output.copy_(_roi_align(input, rois, **settings))


def roi_align_backward(
    grad_output: Tensor, rois: Tensor, argmax_y: Tensor, argmax_x: Tensor, grad_input: Tensor, **settings
) -> None:
    """mmcv's ``roi_align_backward``: ``grad_input`` (N, C, H, W) += the gradient of :func:`_roi_align` for
    ``grad_output`` (R, C, h, w), by autograd through torchvision's op (linear in its input: any input serves)."""
    with torch.enable_grad():
        probe = grad_input.detach().requires_grad_()
        (grad,) = torch.autograd.grad(_roi_align(probe, rois, **settings), probe, grad_output)
    grad_input.add_(grad)


def troubleshooting(case: str) -> str:
    """The command printing ``case`` of the troubleshooting catalogue the installed package holds (``.mim``)."""
    return f'python {osp.join(osp.dirname(__file__), ".mim", "tools", "misc", "troubleshooting.py")} {case}'


def build_hint() -> str:
    """How to build mmcv's compiled ops into the running environment (the installed mmcv's version; its setup.py
    needs ``pkg_resources``; ``--force-reinstall`` also rebuilds a compiled mmcv that does not load)."""
    import mmcv

    return (
        f'pip uninstall -y mmcv-lite && pip install "setuptools<82" && MMCV_WITH_OPS=1 pip install '
        f'--no-build-isolation --no-binary mmcv --no-deps --force-reinstall "mmcv=={mmcv.__version__}" '
        f"(a torch whose headers need C++20: {troubleshooting('op-not-served')})"
    )


def not_provided(op: str) -> str:
    """The one line an op outside :data:`PROVIDED` raises."""
    return (
        f"mmcv._ext.{op} is not provided by mmvitreg's stand-in for mmcv's compiled ops (mmvitreg/mmcv_ops.py:"
        f" {', '.join(PROVIDED)}); build mmcv's ops in this environment: {build_hint()}"
    )


def _unprovided(name: str):
    """The module ``__getattr__`` of the served ``mmcv._ext``: any op name is an op that raises when called."""
    if name.startswith('__'):
        raise AttributeError(name)

    def op(*args, **kwargs):
        raise NotImplementedError(not_provided(name))

    op.__name__ = name
    return op


def serve(module) -> None:
    """Fill the ``mmcv._ext`` that :class:`StandIn` loads: :data:`PROVIDED`, and :func:`_unprovided` for the rest."""
    module.__dict__.update({name: globals()[name] for name in PROVIDED}, __getattr__=_unprovided)


def backend() -> str:
    """The one log line saying which code serves mmcv's ops here (imports ``mmcv._ext``)."""
    import mmcv._ext

    if isinstance(mmcv._ext.__loader__, StandIn):
        import torchvision

        return (
            f"mmcv ops: torchvision {torchvision.__version__}'s kernels through mmvitreg/mmcv_ops.py "
            f"({', '.join(PROVIDED)}; no compiled mmcv._ext here)"
        )
    return f"mmcv ops: mmcv's compiled ops ({mmcv._ext.__file__})"
