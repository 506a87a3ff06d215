"""Behaviours of the token trace (``mmvitreg/models/trace``) and of the composition rule of its users
(``mmvitreg/models/trace_users.py``) that the mutation run (``tools/misc/mutation_score.py``, docs/mutation.md) found
untested: the mixing plan's formulas and grid checks, the recording API driven by a fake backbone (which block is
tapped, which values a stream is stepped with, which points are filled), the one index resolver, every branch of
the one check between a backbone's spec and a user's request, and how a model checks, unions and runs its users.
No real backbone, no training: random tensors, a recording stream and fake users."""

import dataclasses
import re

import pytest
import torch
from torch import nn

from mmvitreg.models.layers import WindowLayout
from mmvitreg.models.trace import (
    MixPlan,
    TokenTrace,
    TraceRequest,
    TraceSpec,
    TraceUserError,
    check_request,
    check_trace_user,
    resolve_indices,
    trace_request_of,
)
from mmvitreg.models.trace_users import TraceUsers, check_image_target

INDEX = torch.tensor([2, 0, 1])  # no sample is its own partner, and index is not its own inverse
MASK = torch.tensor(
    [[[1.0, 0.25, 0.0], [0.5, 1.0, 0.0]], [[0.0, 0.0, 1.0], [1.0, 0.75, 1.0]], [[0.5, 0.5, 0.5], [0.0, 1.0, 1.0]]]
)  # (B=3, Hg=2, Wg=3): not square, not symmetric


def plan(**kw) -> MixPlan:
    return MixPlan(index=INDEX, mask=MASK, **kw)


# ---------------------------------------------------------------- MixPlan


def test_a_token_mix_is_m_own_plus_one_minus_m_partner_row_major_on_the_grid():
    """MixToken: token t of sample b becomes m_bt x_bt + (1 - m_bt) x_{index_b, t}, t = h * Wg + w (row-major)."""
    x = torch.rand(3, 6, 4) + 1  # (B, Hg * Wg, C), C != N so that a wrongly placed mask axis cannot broadcast
    out = plan().mix_tokens(x)
    for b in range(3):
        for t in range(6):
            m = MASK[b, t // 3, t % 3]
            torch.testing.assert_close(out[b, t], m * x[b, t] + (1 - m) * x[INDEX[b], t])


def test_an_image_mix_uses_the_pixel_mask_and_refuses_a_plan_without_one_or_other_image_sizes():
    """CutMix in pixel space (TL-Align): m x + (1 - m) x[index] with the (B, H, W) pixel mask; a token plan has
    no pixel mask, and images of another size than the mask are refused."""
    pixel = torch.rand(3, 4, 5)
    x = torch.rand(3, 2, 4, 5) + 1
    p = plan(pixel_mask=pixel)
    assert p.in_pixels and not plan().in_pixels
    torch.testing.assert_close(p.mix_images(x), x * pixel[:, None] + x[INDEX] * (1 - pixel[:, None]))
    with pytest.raises(ValueError, match='has no pixel_mask'):
        plan().mix_images(x)
    with pytest.raises(ValueError, match=r'pixel mask is \(4, 5\) but the images are \(5, 4\)'):
        p.mix_images(torch.rand(3, 2, 5, 4))


def test_lam_is_each_samples_mean_mask_and_labels_mix_by_it():
    """MixToken Eq. 10: lam_b = mean of the mask; y_hat = lam y + (1 - lam) y[index], integer labels as floats."""
    lam = torch.tensor([2.75 / 6, 3.75 / 6, 3.5 / 6])
    torch.testing.assert_close(plan().lam, lam)
    y = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1]])
    out = plan().mix_labels(y)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, y * lam[:, None] + y[INDEX] * (1 - lam[:, None]))
    torch.testing.assert_close(out.sum(1), torch.ones(3))


def test_check_grid_passes_the_plans_grid_and_names_the_owner_of_another():
    plan().check_grid((2, 3), 'ViT has')
    plan().check_grid(torch.Size([2, 3]), 'ViT has')
    with pytest.raises(ValueError, match=r"but ViT has \(2, 2\): set the plan's patch_size"):
        plan().check_grid((2, 2), 'ViT has')


# ---------------------------------------------------------------- capabilities: indices, spec, request


def test_resolve_indices_counts_negatives_from_the_last_and_refuses_the_first_outside():
    assert resolve_indices((0, 3, -1, -4), 4) == (0, 3, 3, 0)
    assert resolve_indices((), 0) == ()
    for bad in (4, -5):
        with pytest.raises(
            IndexError, match=f'stage index {bad} is out of range for a backbone with 4 stages'
        ) as error:
            resolve_indices((1, bad, 7), 4, 'stage')
        assert error.value.index == bad


def test_a_spec_defaults_to_every_block_tappable_and_refuses_inconsistent_facts():
    spec = TraceSpec(3, (8, 8, 8), services={'mix'}, stage_channels=(4, 8), points={'stages'})
    assert spec.tappable == (0, 1, 2) and spec.num_stages == 2 and spec.services == frozenset({'mix'})
    assert spec.tappable_text == '0..2' and TraceSpec(4, (1,) * 4, tappable=(1, 3)).tappable_text == '1, 3'
    assert TraceSpec(3, (8,) * 3).num_stages == 0
    assert TraceSpec(2, [8, 16], tappable=[1]).channels == (8, 16) and spec.tappable == (0, 1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):  # a backbone's spec is fixed when it is built
        spec.num_blocks = 4
    with pytest.raises(ValueError, match=r"unknown trace services \['mixx'\]; known: \['attn', 'mix', 'stream'\]"):
        TraceSpec(1, (8,), services={'mixx'})
    with pytest.raises(ValueError, match='unknown trace facts'):
        TraceSpec(1, (8,), facts={'square'})
    with pytest.raises(ValueError, match='gives 2 channel counts for 3 blocks'):
        TraceSpec(3, (8, 8))
    with pytest.raises(ValueError, match="point 'stages' exactly when"):
        TraceSpec(1, (8,), points={'stages'})
    with pytest.raises(ValueError, match="point 'stages' exactly when"):
        TraceSpec(1, (8,), stage_channels=(8,))


def test_a_request_implies_its_services_points_and_whether_it_needs_a_trace():
    stream = object()
    assert not TraceRequest().needs_trace and not TraceRequest(outputs=(0,), out_channels=(8,)).needs_trace
    for kw in (
        dict(trace=True),
        dict(token_layers=(0,)),
        dict(attn_layers=(0,)),
        dict(points={'final'}),
        dict(facts={'cls_token'}),
        dict(services={'mix'}),
        dict(stream=stream),
        dict(stages=(0,)),
    ):
        assert TraceRequest(**kw).needs_trace, kw
    assert TraceRequest(stages=(-1,)).points == frozenset({'stages'})
    assert TraceRequest(attn_layers=(1,), services={'mix'}, stream=stream).all_services == {'mix', 'attn', 'stream'}
    assert TraceRequest(token_layers=(1,)).all_services == frozenset()
    lists = TraceRequest(token_layers=[1, -1], attn_layers=[0], stages=[0], outputs=[0], out_channels=[8])
    assert (lists.token_layers, lists.attn_layers, lists.stages, lists.outputs, lists.out_channels) == (
        (1, -1),
        (0,),
        (0,),
        (0,),
        (8,),
    )  # tuples, so a request is hashable and compares equal to its copy
    assert hash(lists) == hash(
        TraceRequest(token_layers=(1, -1), attn_layers=(0,), stages=(0,), outputs=(0,), out_channels=(8,))
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        lists.token_layers = (2,)
    with pytest.raises(ValueError, match=r'token_channels \(8,\) need one entry per entry of token_layers \(0, 1\)'):
        TraceRequest(token_layers=(0, 1), token_channels=(8,))
    with pytest.raises(ValueError, match='stage_channels'):
        TraceRequest(stages=(0,), stage_channels=(8, 8))
    with pytest.raises(ValueError, match='unknown trace points'):
        TraceRequest(points={'logits'})


def test_a_union_merges_taps_in_first_seen_order_and_refuses_two_streams():
    stream = object()
    a = TraceRequest(token_layers=(3, 1), points={'embed'}, stream=stream, stages=(1,))
    b = TraceRequest(
        token_layers=(1, 0), attn_layers=(2,), facts={'cls_token'}, services={'mix'}, stream=stream, stages=(0, 1)
    )
    union = TraceRequest.union([a, b])
    assert union.token_layers == (3, 1, 0) and union.attn_layers == (2,) and union.stages == (1, 0)
    assert union.points == {'embed', 'stages'} and union.facts == {'cls_token'} and union.services == {'mix'}
    assert union.stream is stream and union.needs_trace
    assert not TraceRequest.union([TraceRequest(outputs=(0,))]).trace
    assert TraceRequest.union([TraceRequest(), TraceRequest(trace=True)]).trace
    with pytest.raises(ValueError, match='carries one token stream, but 2 trace users bring one: object, object'):
        TraceRequest.union([a, TraceRequest(stream=object())])


def test_trace_request_of_a_user_without_one_is_empty():
    request = TraceRequest(token_layers=(1,))
    assert trace_request_of(type('U', (), {'trace_request': request})()) is request
    assert trace_request_of(object()) == TraceRequest()


# ---------------------------------------------------------------- check_request: every misfit is raised

SPEC = TraceSpec(
    4,
    (8, 8, 16, 16),
    tappable=(2, 3),
    num_extra_tokens=1,
    services={'attn', 'mix', 'stream'},
    points={'embed', 'stages'},
    facts={'cls_token'},
    out_types=('featmap', 'raw'),
    out_type='raw',
    stage_channels=(8, 16),
    out_channels=(8, 16),
    patch_stride=16,
)


def check(**kw):
    check_request(SPEC, TraceRequest(**kw), 'User', 'Net')


def test_a_request_the_backbone_serves_passes_at_every_boundary():
    check(
        token_layers=(2, 3, -1, -2),
        token_channels=(16, 16, 16, 16),
        attn_layers=(-1,),
        points={'embed'},
        facts={'cls_token'},
        services={'mix'},
        stages=(0, -2),
        stage_channels=(8, 8),
        outputs=(1, -2),
        out_channels=(16, 8),
        out_type='raw',
        patch_size=16,
        stream=type('S', (), {'num_layers': 4})(),
    )
    check(stream=object())  # a stream without num_layers takes the trace's depth
    check_request(None, TraceRequest(outputs=(5,)), 'User', 'Net')  # outputs only: any backbone


def test_no_trace_a_missing_service_point_or_fact_is_a_capability_error():
    with pytest.raises(TraceUserError, match='User needs a backbone that takes a token trace; Net does not'):
        check_request(None, TraceRequest(trace=True), 'User', 'Net')
    spec = TraceSpec(4, (8,) * 4, services={'mix'}, points={'embed'}, facts={'cls_token'})
    cases = (
        (dict(stream=object()), "service ['stream']"),
        (dict(attn_layers=(0,)), "service ['attn']"),
        (dict(points={'final'}), "point ['final']"),
        (dict(facts={'isotropic'}), "fact ['isotropic']"),
        (dict(services={'stream'}, points={'final'}), "service ['stream'] (carries"),
    )
    for kw, words in cases:
        with pytest.raises(TraceUserError, match=re.escape(f'User needs the {words}')):
            check_request(spec, TraceRequest(**kw), 'User', 'Net')
    with pytest.raises(TraceUserError, match=r"the point \['final'\] \(records the last block's tokens") as e:
        check(points={'final'})
    assert "services ['attn', 'mix', 'stream'], points ['embed', 'stages'], facts ['cls_token']" in str(e.value)


def test_a_tap_outside_the_blocks_or_stages_or_the_tappable_blocks_is_a_tap_error():
    for kw, what in (
        (dict(token_layers=(4,)), 'the tokens of a block'),
        (dict(token_layers=(-5,)), 'the tokens'),
        (dict(attn_layers=(4,)), 'the attention maps of a block'),
        (dict(stages=(2,)), 'the outputs of a stage'),
        (dict(stages=(-3,)), 'the outputs'),
    ):
        with pytest.raises(TraceUserError, match=f'User taps {what}'):
            check(**kw)
    for kw, what in ((dict(token_layers=(3, 1)), 'tokens'), (dict(attn_layers=(-3,)), 'attention maps')):
        with pytest.raises(
            TraceUserError,
            match=rf'taps the {what} of blocks \[(1|-3)\], but Net traces only '
            r'blocks 2..3 \(of 0..3\)',
        ):
            check(**kw)
    with pytest.raises(TraceUserError, match=r'reads the backbone outputs \[2\], but Net gives 2'):
        check(outputs=(2,))
    with pytest.raises(TraceUserError, match='outputs'):
        check(outputs=(-3,))


def test_another_out_type_is_a_format_error_settable_only_when_the_backbone_offers_it():
    with pytest.raises(TraceUserError, match="set the backbone's out_type='featmap'"):
        check(out_type='featmap')
    with pytest.raises(TraceUserError, match=r"which Net does not produce \(it offers \['featmap', 'raw'\]\)"):
        check(out_type='cls_token')


def test_a_tap_of_another_width_is_a_channel_error_naming_the_widths():
    for kw, where, actual in (
        (dict(token_layers=(0, -1), token_channels=(8, 8)), 'the tokens of blocks', '8, 16'),
        (dict(stages=(-1,), stage_channels=(8,)), 'the outputs of stages', '16'),
        (dict(outputs=(0,), out_channels=(16,)), 'its outputs', '8'),
    ):
        kw.setdefault('token_layers', ())
        if where == 'the tokens of blocks':
            spec = TraceSpec(4, (8, 8, 16, 16))
            with pytest.raises(
                TraceUserError,
                match=rf'expects \[8, 8\] channels in {where} \[0, -1\] but Net '
                r'has \[8, 16\]',
            ):
                check_request(spec, TraceRequest(**kw), 'User', 'Net')
        else:
            with pytest.raises(TraceUserError, match=rf'channels in {where} .* but Net has \[{actual}\]'):
                check(**kw)
    # a backbone that states no output widths is not checked
    check_request(TraceSpec(1, (8,)), TraceRequest(outputs=(3,), out_channels=(99,)), 'User', 'Net')


def test_a_stream_for_another_depth_and_a_plan_on_another_patch_size_are_refused():
    with pytest.raises(TraceUserError, match='num_layers=3 blocks but Net has 4: set num_layers=4'):
        check(stream=type('S', (), {'num_layers': 3})())
    with pytest.raises(
        TraceUserError, match="plan on 32-pixel patches but Net embeds 16-pixel patches: set the plan's patch_size=16"
    ):
        check(patch_size=32)
    check_request(TraceSpec(1, (8,)), TraceRequest(patch_size=32), 'User', 'Net')  # no stride stated: unchecked


def test_check_trace_user_reads_the_backbones_spec_and_name():
    net = type('Net', (), {'trace_spec': SPEC})()
    check_trace_user(net, TraceRequest(token_layers=(-1,)), 'User')
    with pytest.raises(TraceUserError, match='User taps the tokens of a block that Net does not have'):
        check_trace_user(net, TraceRequest(token_layers=(9,)), 'User')
    with pytest.raises(TraceUserError, match='object does not'):
        check_trace_user(object(), TraceRequest(trace=True), 'User')


# ---------------------------------------------------------------- TokenTrace: the recording API


class RecordingStream:
    """A stream that records its calls: it starts from given values and adds what each block's attention mixed."""

    def __init__(self, start):
        self.start_values, self.calls = start, []

    def start(self, trace):
        self.calls.append(('start', trace.grid, trace.num_extra_tokens, trace.mix))
        return self.start_values

    def step(self, trace, layer, values, mixed, stochastic=False):
        self.calls.append(('step', layer, values, mixed, stochastic))
        return values + mixed

    def resize(self, values, grid, new_grid):
        self.calls.append(('resize', grid, new_grid))
        return values[:, :1] * 10


def block_run(scale):
    """A block that multiplies its tokens by ``scale``, gives an attention map of its index when asked and makes
    ``mixed = 2 values + 1`` of a ride."""

    def run(x, need_attn, ride):
        if ride is not None:
            ride.mixed = ride.values * 2 + 1
        out = x * scale
        return (out, torch.full((x.shape[0], 1, 2, 2), float(scale))) if need_attn else out

    return run


SPEC3 = TraceSpec(
    3,
    (4, 4, 4),
    num_extra_tokens=1,
    services={'attn', 'mix', 'stream'},
    points={'embed', 'final', 'stages'},
    stage_channels=(4, 4),
    patch_stride=16,
)


def test_start_checks_the_trace_mixes_records_embed_and_starts_the_stream():
    tokens = torch.rand(3, 6, 4) + 1
    stream = RecordingStream(torch.rand(3, 7, 2))
    trace = TokenTrace.for_request(
        TraceRequest(token_layers=(-1,), attn_layers=(0,), points={'embed'}, stream=stream), mix=plan(), samples=['s']
    )
    assert trace.samples == ['s'] and trace.stream is stream and trace.points == {'embed'}
    out = trace.start(SPEC3, tokens, torch.Size([2, 3]))
    torch.testing.assert_close(out, plan().mix_tokens(tokens))
    assert trace.embed is out and trace.grid == (2, 3) and isinstance(trace.grid, tuple)
    assert (trace.num_extra_tokens, trace.num_layers, trace.num_stages) == (1, 3, 2)
    assert trace._token_taps == {2} and trace._attn_taps == {0}
    assert stream.calls == [('start', (2, 3), 1, trace.mix)] and trace._values is stream.start_values


def test_start_without_points_or_a_mix_leaves_the_tokens_and_records_nothing():
    tokens = torch.rand(3, 6, 4)
    trace = TokenTrace()
    assert trace.start(SPEC3, tokens, (2, 3)) is tokens and trace.embed is None and trace._values is None
    # a plan mixed in pixel space is not mixed again, needs no 'mix' service and no grid check without a stream
    pixels = plan(pixel_mask=torch.ones(3, 32, 48))
    trace = TokenTrace(mix=pixels, points={'embed'})
    assert trace.start(TraceSpec(3, (4,) * 3, points={'embed'}), tokens, (5, 5)) is tokens and trace.embed is tokens


def test_start_refuses_what_the_spec_lacks_and_a_plan_on_another_grid():
    tokens = torch.rand(3, 6, 4)
    with pytest.raises(TraceUserError, match='this trace taps the tokens of a block that ViT does not have'):
        TokenTrace(token_layers=(3,)).start(SPEC3, tokens, (2, 3), 'ViT')
    with pytest.raises(TraceUserError, match=r"the service \['mix'\]"):
        TokenTrace(mix=plan()).start(TraceSpec(3, (4,) * 3), tokens, (2, 3))
    with pytest.raises(ValueError, match=r'covers a \(2, 3\) token grid but ViT has \(3, 2\)'):
        TokenTrace(mix=plan()).start(SPEC3, tokens, (3, 2), 'ViT')
    # the plan a stream starts from is checked even when the images were mixed in pixel space
    trace = TokenTrace(mix=plan(pixel_mask=torch.ones(3, 4, 4)), stream=RecordingStream(torch.rand(3, 7, 2)))
    with pytest.raises(ValueError, match=r'covers a \(2, 3\) token grid but ViT has \(3, 2\)'):
        trace.start(SPEC3, tokens, (3, 2), 'ViT')


def test_blocks_record_the_tapped_tokens_and_maps_and_step_the_stream_with_what_each_block_mixed():
    start = torch.rand(3, 7, 2)
    stream = RecordingStream(start)
    trace = TokenTrace(token_layers=(-1, 0), attn_layers=(1,), points={'final', 'stages'}, stream=stream)
    x = trace.start(SPEC3, torch.rand(3, 6, 4), (2, 3))
    x = torch.cat([torch.zeros(3, 1, 4), x], 1)
    outs = []
    for i in range(3):
        x = trace.block(i, block_run(i + 2), x, torch.Size([2, 3]))
        outs.append(x)
    assert set(trace.tokens) == {0, 2} and trace.tokens[0] is outs[0] and trace.tokens[2] is outs[2]
    assert set(trace.attn) == {1} and (trace.attn[1] == 3).all() and trace.windows == {}
    assert trace.grids == {0: (2, 3), 1: (2, 3), 2: (2, 3)} and trace.last_grid == (2, 3)
    values = start
    for i in range(3):
        _, layer, before, mixed, stochastic = stream.calls[i + 1]
        assert layer == i and stochastic is False  # the ride did not say its map is a softmax
        torch.testing.assert_close(before, values)
        torch.testing.assert_close(mixed, values * 2 + 1)
        values = values + mixed
        torch.testing.assert_close(trace.streamed[i], values)
    assert trace._values is trace.streamed[2]
    trace.stage(1, outs[2][:, 1:], (2, 3))
    trace.end(outs[2] * 5)
    assert trace.stages[1] is not None and trace.stage_grids == {1: (2, 3)}
    torch.testing.assert_close(trace.final, outs[2] * 5)


def test_a_windowed_block_rides_its_windows_and_records_the_layout_of_a_tapped_map():
    """Swin: the stream's values enter the block partitioned by its window layout and come back on the grid."""
    layout = WindowLayout((3, 3), 2, shift=1)
    start = torch.rand(2, 9, 3)
    stream = RecordingStream(start)
    trace = TokenTrace(attn_layers=(0,), stream=stream)
    trace.start(TraceSpec(2, (4, 4), services={'attn', 'stream'}), torch.rand(2, 9, 4), (3, 3))
    seen = []

    def run(x, need_attn, ride):
        seen.append(ride.values)
        ride.mixed, ride.stochastic = ride.values * 2 + 1, True
        return x, torch.zeros(1)

    trace.block(0, run, torch.rand(2, 9, 4), (3, 3), layout)
    torch.testing.assert_close(seen[0], layout.partition(start))  # (B, nW, n, D) per image
    torch.testing.assert_close(stream.calls[1][3], start * 2 + 1)
    assert stream.calls[1][4] is False  # a softmax map, but the 3x3 grid is padded to 4x4: rows lose mass
    assert trace.windows == {0: layout}
    trace.block(
        1,
        lambda x, need_attn, ride: (ride.__setattr__('mixed', ride.values), x)[1],
        torch.rand(2, 9, 4),
        (3, 3),
        layout,
    )
    assert set(trace.windows) == {0}


def test_a_softmax_ride_without_padding_tells_the_stream_its_rows_keep_their_mass():
    """``stochastic`` reaches the stream only where the ride says its map is a softmax and no window pads."""
    for layout, grid, expect in (
        (None, (2, 2), True),
        (WindowLayout((4, 4), 2, shift=1), (4, 4), True),
        (WindowLayout((3, 3), 2), (3, 3), False),
    ):
        n = grid[0] * grid[1]
        stream = RecordingStream(torch.rand(2, n, 2))
        trace = TokenTrace(stream=stream)
        trace.start(TraceSpec(1, (4,), services={'stream'}), torch.rand(2, n, 4), grid)

        def run(x, need_attn, ride):
            ride.mixed, ride.stochastic = ride.values, True
            return x

        trace.block(0, run, torch.rand(2, n, 4), grid, layout)
        assert stream.calls[-1][4] is expect, (layout, grid)


def test_downsample_resizes_the_stream_and_points_are_filled_only_when_asked():
    stream = RecordingStream(torch.rand(2, 4, 3))
    trace = TokenTrace(stream=stream)
    trace.start(TraceSpec(1, (4,), services={'stream'}), torch.rand(2, 4, 4), (2, 2))
    assert trace.num_extra_tokens == 0  # a spec that states no extra tokens has none (Swin)
    trace.downsample(torch.Size([2, 2]), [1, 1])
    assert stream.calls[-1] == ('resize', (2, 2), (1, 1))
    torch.testing.assert_close(trace._values, stream.start_values[:, :1] * 10)
    trace.stage(0, torch.rand(2, 1, 4), (1, 1))
    trace.end(torch.rand(2, 1, 4))
    assert trace.stages == {} and trace.stage_grids == {} and trace.final is None
    TokenTrace().downsample((2, 2), (1, 1))  # no stream: nothing to resize


def test_readers_resolve_negative_layers_and_drop_the_extra_tokens():
    trace = TokenTrace(num_layers=3, num_stages=2, num_extra_tokens=1)
    x = torch.rand(2, 1 + 6, 5)
    trace.tokens, trace.grids, trace.final = {1: x}, {1: (2, 3), 2: (1, 1)}, x * 2
    assert trace.index(-2) == 1 and trace.index(2) == 2 and trace.last_grid == (1, 1)
    with pytest.raises(IndexError, match='block index -4'):
        trace.index(-4)
    torch.testing.assert_close(trace.patch_tokens(-2), x[:, 1:])
    torch.testing.assert_close(trace.final_patch_tokens(), x[:, 1:] * 2)
    fmap = trace.token_map(1)
    assert fmap.shape == (2, 5, 2, 3)
    torch.testing.assert_close(fmap[:, :, 1, 0], x[:, 1 + 3])  # row-major: cell (1, 0) is patch token 3
    s = torch.rand(2, 4 * 2, 3)
    trace.stages, trace.stage_grids = {1: s}, {1: (4, 2)}
    smap = trace.stage_map(-1)
    assert smap.shape == (2, 3, 4, 2)
    torch.testing.assert_close(smap[:, :, 2, 1], s[:, 5])
    with pytest.raises(IndexError, match='stage index 2 is out of range for a backbone with 2 stages'):
        trace.stage_map(2)


# ---------------------------------------------------------------- trace_users: the composition rule


class User(nn.Module):
    """A trace user with a given request, image target and terms."""

    def __init__(self, request=TraceRequest(), image_target=False, terms=None, patch_size=16):
        super().__init__()
        self.trace_request, self.image_target, self.terms, self.patch_size = request, image_target, terms, patch_size

    def loss(self, feats, data_samples, trace):
        return dict(self.terms)

    def transform(self, trace, data_samples):
        return dict(self.terms)


class Backbone(nn.Module):
    trace_spec = TraceSpec(2, (4, 4), services={'mix', 'stream'}, patch_stride=16)

    def forward(self, x, **kw):
        self.called_with = kw
        return (x,)


class Model(TraceUsers, nn.Module):
    image_targets = True

    def __init__(self, head=None, **kw):
        nn.Module.__init__(self)
        self.backbone, self.head = Backbone(), head
        self.init_trace_users(fixed_users=[head] if head is not None else (), **kw)

    def model_losses(self, feats, data_samples, trace):
        return {'loss_cls': feats[0].sum()}


def test_an_image_target_user_is_refused_only_by_a_kind_without_image_targets():
    check_image_target(User(image_target=True), 'ImageClassifier', True)
    check_image_target(User(), 'EncoderDecoder', False)
    with pytest.raises(
        TraceUserError,
        match=r'User trains with an image-level target .* which EncoderDecoder does '
        r'not have .*a token loss that needs no label here',
    ) as error:
        check_image_target(User(image_target=True), 'EncoderDecoder', False)
    assert isinstance(error.value, ValueError)


def test_a_trace_is_made_only_for_a_user_or_a_plan_the_backbone_mixes():
    assert TraceUsers.make_trace(TraceRequest()) is None
    assert TraceUsers.make_trace(TraceRequest(), plan(pixel_mask=torch.ones(3, 4, 6))) is None
    trace = TraceUsers.make_trace(TraceRequest(), plan(), ['s'])
    assert trace.mix is not None and trace.samples == ['s']
    trace = TraceUsers.make_trace(TraceRequest(token_layers=(1,)), plan(pixel_mask=torch.ones(3, 4, 6)))
    assert trace.token_layers == (1,) and trace.mix.in_pixels


def test_the_users_terms_are_added_once_each_under_their_own_names():
    losses = {'loss_cls': 1}
    TraceUsers.add_terms(losses, User(), {'loss_a': 2})
    assert losses == {'loss_cls': 1, 'loss_a': 2}
    with pytest.raises(KeyError, match="User returns a term named 'loss', the name of the logged total"):
        TraceUsers.add_terms(losses, User(), {'loss': 3})
    with pytest.raises(KeyError, match="User returns the loss 'loss_a', which another part"):
        TraceUsers.add_terms(losses, User(), {'loss_b': 3, 'loss_a': 4})


def test_a_model_checks_its_users_unions_their_requests_and_runs_the_backbone_once():
    head = User(TraceRequest(token_layers=(0,)), terms={})
    aux = User(TraceRequest(token_layers=(1,)), terms={'loss_aux': torch.tensor(2.0)})
    transform = User(terms={'shift': torch.tensor(0.5)})
    model = Model(head, aux_losses=[aux], target_transform=[transform])
    assert model.train_users == [head, aux, transform] and model.train_request.token_layers == (0, 1)
    assert Model(User(), aux_losses=[aux]).train_users == [aux]  # a head that reads no trace is no trace user
    losses = model.loss(torch.ones(2, 3), ['s'])
    assert losses == {'loss_cls': torch.tensor(6.0), 'shift': torch.tensor(0.5), 'loss_aux': torch.tensor(2.0)}
    assert model.backbone.called_with['trace'].token_layers == (0, 1)
    assert Model(target_transform=[]).target_transform is None
    model = Model()
    model.loss(torch.ones(1), [])
    assert model.backbone.called_with == {}  # no user: an ordinary backbone call
    with pytest.raises(ValueError, match=r"at most one target transform .* got 2: \['TLAlign', 'TokenLabel'\]"):
        Model(target_transform=[dict(type='TLAlign'), dict(type='TokenLabel')])
    with pytest.raises(ValueError, match=r"got 2: \['User', 'TokenLabel'\]"):  # built modules are named by class
        Model(target_transform=[User(), dict(type='TokenLabel')])
    with pytest.raises(TraceUserError, match='User taps the tokens of a block that Backbone does not have'):
        Model(aux_losses=[User(TraceRequest(token_layers=(2,)))])


def test_the_plan_a_stream_starts_from_is_checked_against_the_backbones_patch_stride():
    streaming = User(TraceRequest(stream=object()))
    Model(aux_losses=[streaming], mix=User(patch_size=16))
    Model(aux_losses=[User()], mix=User(patch_size=32))  # no stream: only the plan's own request is checked
    with pytest.raises(TraceUserError, match='User, the plan object starts from, draws its plan on 32-pixel patches'):
        Model(aux_losses=[streaming], mix=User(patch_size=32))
