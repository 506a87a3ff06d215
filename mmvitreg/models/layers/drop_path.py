"""Stochastic depth in the fewest operators, for the blocks whose forward mmvitreg runs itself, and their FFN."""

from mmcv.cnn.bricks.drop import DropPath
from mmcv.cnn.bricks.transformer import FFN as MMCVFFN
from torch import Tensor, nn


def drop_path(x: Tensor, module: nn.Module) -> Tensor:
    """``x`` ``(B, ...)`` through a block's ``dropout_layer`` ``module``, as the module's own forward would.

    mmcv's ``DropPath`` runs as timm's ``drop_path`` (`Deep Networks with Stochastic Depth
    <https://arxiv.org/abs/1603.09382>`_): in training each sample's branch is kept with probability
    ``k = 1 - module.drop_prob`` and scaled by ``1 / k``, the mask drawn by one ``bernoulli_`` with ``1 / k`` on it
    (mmcv's distribution in fewer operators). ``drop_prob`` is read at every call, so a schedule holds. Any other
    layer (mmcv's ``Dropout``, a subclass of ``DropPath``, ...) runs its own forward.
    """
    if type(module) is not DropPath:
        return module(x)
    p = module.drop_prob
    if p == 0.0 or not module.training:
        return x
    keep = 1.0 - p
    return x * x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep).div_(keep)


class FFN(MMCVFFN):
    """mmcv's ``FFN`` (its arguments, keys and modules) whose ``forward`` applies its ``dropout_layer`` by
    :func:`drop_path`: ``identity + drop_path(gamma2(layers(x)))`` (no identity with ``add_identity=False``);
    ``(B, N, C)`` -> ``(B, N, C)``."""

    def forward(self, x: Tensor, identity: Tensor = None) -> Tensor:
        out = drop_path(self.gamma2(self.layers(x)), self.dropout_layer)
        if not self.add_identity:
            return out
        return (x if identity is None else identity) + out
