"""The token trace: what travels with the tokens through an mmvitreg backbone (the design: docs/token_trace.md).

A backbone declares what it offers in a :class:`TraceSpec` and fills a :class:`TokenTrace` only through its
recording API (:meth:`TokenTrace.start`, :meth:`~TokenTrace.block`, :meth:`~TokenTrace.downsample` /
:meth:`~TokenTrace.stage`, :meth:`~TokenTrace.end`); a user declares a :class:`TraceRequest`, which
:func:`check_trace_user` compares with the spec when the model is built. A :class:`TokenStream` carries per-token
values through each block's head-averaged attention (TL-Align's labels, Eq. 9) as a
:class:`~mmvitreg.models.layers.Ride`, without the ``(B, heads, N, N)`` maps: ``stream.step`` between blocks,
``stream.resize`` at patch merging, ``trace.streamed[i]`` after block ``i``.

Modules: ``capabilities`` (the spec, the request, the one check, the one index resolver), ``mix_plan``
(:class:`MixPlan`), ``token_trace`` (:class:`TokenTrace`, :class:`TokenStream`).
"""
from .capabilities import (FACTS, POINTS, SERVICES, TraceRequest, TraceSpec, TraceUserError, check_request,
                           check_trace_user, resolve_indices, trace_request_of)
from .mix_plan import MixPlan
from .token_trace import BlockRun, TokenStream, TokenTrace

__all__ = [
    'FACTS', 'POINTS', 'SERVICES', 'BlockRun', 'MixPlan', 'TokenStream', 'TokenTrace', 'TraceRequest', 'TraceSpec',
    'TraceUserError', 'check_request', 'check_trace_user', 'resolve_indices', 'trace_request_of'
]
