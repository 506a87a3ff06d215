"""Which last-layer patch tokens ``h^[L]`` a DiversePatch loss reads, class token dropped: ``'block'`` (paper),
the last block's output (``trace.tokens[-1]``), or ``'final_norm'`` (official ``self.norm(x)[:, 1:]``), the same
tokens after the backbone's final norm (``trace.final``)."""

from typing import Optional

from torch import Tensor

from ..trace import TokenTrace, TraceRequest

LAST_LAYER_TOKENS = ('block', 'final_norm')


def last_layer_request(tokens: str, channels: Optional[int] = None) -> TraceRequest:
    """The request of a loss that reads ``tokens``: a tap of the last block (whose width is checked against
    ``channels`` when given), or the point ``'final'``."""
    if tokens not in LAST_LAYER_TOKENS:
        raise ValueError(f'tokens must be one of {LAST_LAYER_TOKENS}, got {tokens!r}')
    if tokens == 'block':
        return TraceRequest(token_layers=(-1,), token_channels=() if channels is None else (channels,))
    return TraceRequest(points={'final'})


def last_layer_tokens(trace: TokenTrace, tokens: str) -> Tensor:
    """``(B, n, C)`` last-layer patch tokens of a filled trace, on the grid ``trace.last_grid``."""
    return trace.patch_tokens(-1) if tokens == 'block' else trace.final_patch_tokens()
