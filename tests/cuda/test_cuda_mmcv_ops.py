"""CPU vs. CUDA for the ops mmvitreg/mmcv_ops.py serves as mmcv's where mmcv has no compiled ones (issue 42 item 2):
RoIAlign forward and backward (torchvision's kernels, called as mmcv calls its own) and nms keep the same indices,
on the same inputs; float32, RoIAlign to 1e-5 (the CUDA backward adds with atomics, in any order)."""

import pytest
import torch
from device_helpers import DEVICE, needs_device
from test_mmcv_ops import HOST, ROI_CASES, make_boxes, make_rois, roi_align_both_ways, stand_in_ext

pytestmark = needs_device


@pytest.mark.parametrize('size, scale, ratio, aligned', ROI_CASES)
def test_roi_align_forward_and_backward_agree_between_cpu_and_device(size, scale, ratio, aligned):
    torch.manual_seed(0)
    feats, rois = torch.randn(HOST), make_rois(torch.float32)
    grad_out = torch.randn(len(rois), HOST[1], *size)
    cpu = roi_align_both_ways(stand_in_ext(), feats, rois, size, scale, ratio, aligned, grad_out)
    device = roi_align_both_ways(
        stand_in_ext(), feats.to(DEVICE), rois.to(DEVICE), size, scale, ratio, aligned, grad_out.to(DEVICE)
    )
    for a, b in zip(device, cpu):
        assert a.device.type == torch.device(DEVICE).type and b.abs().sum() > 0
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=1e-5)


@pytest.mark.parametrize('offset', [0, 1])
@pytest.mark.parametrize('n, iou_threshold', [(300, 0.5), (2000, 0.7)])
def test_nms_keeps_the_same_boxes_on_cpu_and_device(offset, n, iou_threshold):
    boxes, scores = make_boxes(n, seed=n)
    cpu = stand_in_ext().nms(boxes, scores, iou_threshold=iou_threshold, offset=offset)
    device = stand_in_ext().nms(boxes.to(DEVICE), scores.to(DEVICE), iou_threshold=iou_threshold, offset=offset)
    assert device.device.type == torch.device(DEVICE).type and device.cpu().tolist() == cpu.tolist()
