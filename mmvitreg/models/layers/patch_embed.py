"""The token grid of a patch embedding."""

from typing import Sequence, Tuple


def token_grid(input_size, stride: int) -> Tuple[int, int]:
    """Token grid ``(Hg, Wg)`` of an input of ``input_size`` (int or ``(H, W)``) padded bottom/right to a multiple
    of ``stride`` (a patch embedding's, or a window side): ``Hg = ceil(H / stride)``."""
    h, w = (input_size, input_size) if not isinstance(input_size, Sequence) else input_size
    return (h + stride - 1) // stride, (w + stride - 1) // stride  # not -(-h // s): ONNX truncates it
