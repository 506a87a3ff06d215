"""Which last-layer patch tokens ``h^[L]`` a DiversePatch loss reads (shared by its three losses).

``'block'`` (paper): the output of the backbone's last block, ``h^[L]`` in the paper's notation
(``trace.tokens[-1]``); ``'final_norm'`` (official code, ``self.norm(x)[:, 1:]``): the same tokens
after the backbone's final norm (``trace.final``). Either way the class token is dropped.
"""
from typing import Optional

from torch import Tensor

from ..trace import TokenTrace, TraceRequest

LAST_LAYER_TOKENS = ('block', 'final_norm')


def last_layer_request(tokens: str, channels: Optional[int] = None) -> TraceRequest:
    """The request of a loss that reads ``tokens`` (one of :data:`LAST_LAYER_TOKENS`): a tap of the last
    block (whose width is checked against ``channels`` when given), or the point ``'final'``."""
    if tokens not in LAST_LAYER_TOKENS:
        raise ValueError(f'tokens must be one of {LAST_LAYER_TOKENS}, got {tokens!r}')
    if tokens == 'block':
        return TraceRequest(token_layers=(-1, ), token_channels=() if channels is None else (channels, ))
    return TraceRequest(points={'final'})


def last_layer_tokens(trace: TokenTrace, tokens: str) -> Tensor:
    """``(B, n, C)`` last-layer patch tokens of a filled trace, class token dropped."""
    return trace.patch_tokens(-1) if tokens == 'block' else trace.final_patch_tokens()


def last_layer_grid(trace: TokenTrace):
    """``(H, W)`` token grid of the last block (the tokens of :func:`last_layer_tokens`)."""
    return trace.last_grid
