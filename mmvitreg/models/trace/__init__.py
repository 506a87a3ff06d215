"""The token trace: what travels with the tokens through an mmvitreg backbone (the design: docs/token_trace.md).

A backbone declares what it offers in a :class:`TraceSpec` and fills a :class:`TokenTrace`; a user declares a
:class:`TraceRequest`, checked against the spec when the model is built (:func:`check_trace_user`).
"""

from .capabilities import (
    FACTS,
    POINTS,
    SERVICES,
    TraceRequest,
    TraceSpec,
    TraceUserError,  # noqa: F401
    check_request,
    check_trace_user,
    resolve_indices,
    trace_request_of,
)
from .mix_plan import MixPlan  # noqa: F401
from .token_trace import TokenStream, TokenTrace  # noqa: F401
