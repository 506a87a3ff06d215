"""The token trace: what travels with the tokens through an mmvitreg backbone.

All techniques of this package need something to ride along with the tokens:

* MixToken / TL-Align mix the token maps of two images right after patch embedding, before the
  position embedding (the *mixing plan* goes in);
* token labeling, DiversePatch, DRLoc and the diagnostics read the tokens of chosen blocks and,
  for some, their attention maps (the *taps* come out);
* TL-Align carries per-token labels through every block's attention (a *stream*).

**Backbones.** A backbone that takes a trace declares what it offers in a :class:`TraceSpec`
(``backbone.trace_spec``): its blocks and which of them can be tapped, their token widths, the
services it gives (``'mix'``, ``'attn'``, ``'stream'``), the recording points it has besides the
blocks (``'embed'``, ``'final'``, ``'stages'``), facts about its tokens (``'cls_token'``,
``'isotropic'``) and the output formats (``out_type``) it can produce. Its ``forward(x, trace=None)``
fills the trace only through the recording API of :class:`TokenTrace`, at fixed points:

* :meth:`TokenTrace.start` after the patch embedding (mixes the tokens, records ``'embed'``,
  starts the stream);
* :meth:`TokenTrace.block` for every block (runs it with a :class:`~mmvitreg.models.layers.Ride`
  and an attention map when asked, records its tokens, map and grid, steps the stream);
* :meth:`TokenTrace.downsample` / :meth:`TokenTrace.stage` at a hierarchical backbone's patch
  merging and stage ends;
* :meth:`TokenTrace.end` with the final (normed) tokens.

So the recording code exists once, here. Without a trace the backbone is an ordinary backbone
(same outputs, fused attention, no extra work).

**Trace users.** Whatever reads a trace (a head, an auxiliary loss, a target transform, a batch mix)
declares a :class:`TraceRequest`: the blocks whose tokens / attention maps it taps, the points and
facts it relies on, the backbone output format it reads, its stream. :func:`check_trace_user`
compares a request with a backbone's spec when the model is built and fails at once, naming user,
backbone and the fix (a tap outside the tappable blocks, a missing service, point or fact, an output
format the backbone lacks or is not set to, a block, stage or output of another width than the user's,
a stream for another depth, a mixing plan on another patch size). A user that asks for no trace reads only
the backbone's outputs and works with any backbone, including those with no trace (mmpretrain's ResNet, T2T-ViT,
ConvNeXt).

**Streams: values that ride along with the tokens.** A user that propagates per-token values with
each block's head-averaged attention (TL-Align's labels, paper Eq. 9) need not read the
``(B, heads, N, N)`` maps: it gives its request a :class:`TokenStream`, and :meth:`TokenTrace.block`
hands each block's attention the stream's values as a :class:`~mmvitreg.models.layers.Ride` (in the
block's windows, when it attends in windows). The stream updates its values between blocks
(``stream.step``) and at patch merging (``stream.resize``); ``trace.streamed[i]`` holds them after
block ``i``.

**Modules.** ``capabilities`` (the spec, the request, the one check and its error, the one index
resolver), ``mix_plan`` (:class:`MixPlan`, whose grid it checks itself: :meth:`MixPlan.check_grid`),
``token_trace`` (:class:`TokenTrace`, :class:`TokenStream`).
"""
from .capabilities import (FACTS, POINTS, SERVICES, TraceRequest, TraceSpec, TraceUserError, check_request,
                           check_trace_user, resolve_indices, trace_request_of)
from .mix_plan import MixPlan
from .token_trace import BlockRun, TokenStream, TokenTrace

__all__ = [
    'FACTS', 'POINTS', 'SERVICES', 'BlockRun', 'MixPlan', 'TokenStream', 'TokenTrace', 'TraceRequest', 'TraceSpec',
    'TraceUserError', 'check_request', 'check_trace_user', 'resolve_indices', 'trace_request_of'
]
