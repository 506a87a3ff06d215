"""mmvitreg.CvT (Wu et al. 2021): CvT-13's published configuration and size, its outputs, and the token
trace of its last stage that DRLoc reads."""

import pytest
import torch

from mmvitreg.models.backbones import CvT
from mmvitreg.models.losses import DRLoc
from mmvitreg.models.trace import TokenTrace, TraceUserError, check_trace_user


def test_cvt13_has_the_published_size_and_grids():
    """CvT-13: 20M parameters with a 1000-class head (paper Table 2 and DRLoc Table 3); strides 4/8/16, so a
    224 image ends on a 14x14, 384-d map; the cls token exists only in the last stage."""
    model = CvT(arch='13')
    params = sum(p.numel() for p in model.parameters()) + 384 * 1000 + 1000
    assert params == 19_997_480
    assert [s.cls_token is not None for s in model.stages] == [False, False, True]
    assert [len(s.blocks) for s in model.stages] == [1, 2, 10]
    assert [s.blocks[0].attn.num_heads for s in model.stages] == [1, 3, 6]
    model.eval()
    x = torch.randn(1, 3, 224, 224)
    assert model(x)[0].shape == (1, 384)
    model.out_type = 'featmap'
    assert model(x)[0].shape == (1, 384, 14, 14)
    with pytest.raises(ValueError, match="^Arch 7 is not in default archs \\['13', '21', 'w24'\\]"):
        CvT(arch='7')


def tiny():
    return CvT(
        arch=dict(embed_dims=(8, 16), depths=(1, 2), num_heads=(1, 2)),
        embed_kernels=(3, 3),
        embed_strides=(2, 2),
        embed_paddings=(1, 1),
    )


def test_trace_serves_the_last_stage_map_with_the_cls_head():
    """One forward gives the cls-token output and, through the trace, the last block's token map, equal
    to the 'featmap' output; DRLoc(layers=(-1,)) reads it."""
    model = tiny().eval()
    x = torch.randn(2, 3, 32, 32)
    drloc = DRLoc(in_channels=16, layers=(-1,))
    check_trace_user(model, drloc.trace_request, 'DRLoc')
    trace = TokenTrace(token_layers=(-1,))
    cls = model(x, trace=trace)[0]
    assert cls.shape == (2, 16) and trace.num_extra_tokens == 1 and trace.grids[2] == (8, 8)
    torch.testing.assert_close(model(x)[0], cls)
    model.out_type = 'featmap'
    torch.testing.assert_close(trace.token_map(-1), model(x)[0])
    assert drloc.loss((), [], trace)['loss_drloc'] > 0
    with pytest.raises(TraceUserError, match=r'CvT traces only blocks 1\.\.2 \(of 0\.\.2\)'):
        model(x, trace=TokenTrace(token_layers=(0,)))
