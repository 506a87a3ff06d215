"""Change the stochastic-depth rate of a backbone during training (DiversePatch's segmentation recipe)."""

from typing import List, Sequence, Tuple

from mmengine.hooks import Hook
from torch import nn

from mmvitreg.registry import HOOKS

from .unwrap import unwrap_model


def drop_path_modules(root: nn.Module) -> List[nn.Module]:
    """Every stochastic-depth module under ``root``: mmcv's and timm's ``DropPath`` (a ``drop_prob`` attribute)."""
    return [m for m in root.modules() if type(m).__name__ == 'DropPath' and hasattr(m, 'drop_prob')]


@HOOKS.register_module()
class DropPathScheduleHook(Hook):
    """Stochastic depth that changes over the training iterations.

    `DiversePatch <https://arxiv.org/abs/2104.12753>`_ §5.2, following Swin's segmentation runs: "a stochastic
    depth dropout of 0.3 for the first 80% of training iterations, and increase the dropout ratio to 0.5 for the last
    20%" (the default ``schedule``).

    The rate is the backbone's ``drop_path_rate``, the *largest* per-block rate. At the start of the run the hook
    records each ``DropPath`` module's share ``p_i / max_j p_j`` (:func:`drop_path_modules`) and before every training
    iteration sets ``p_i = share_i * rate(iter / max_iters)``, ``rate`` the last entry of ``schedule`` reached.
    The backbone must be built with a positive ``drop_path_rate`` (a block of rate 0 has no ``DropPath``)::

        custom_hooks = [dict(type='mmvitreg.DropPathScheduleHook', schedule=[(0., 0.3), (0.8, 0.5)])]

    Args:
        schedule (Sequence[Tuple[float, float]]): ``(start fraction of max_iters, rate)`` pairs with increasing
            fractions, the first at 0. Defaults to ``((0., 0.3), (0.8, 0.5))`` (paper).
        module (str): The submodule of the model to search (``''``: the whole model). Defaults to ``'backbone'``.
    """

    priority = 'NORMAL'

    def __init__(self, schedule: Sequence[Tuple[float, float]] = ((0.0, 0.3), (0.8, 0.5)), module: str = 'backbone'):
        schedule = [(float(f), float(r)) for f, r in schedule]
        fractions = [f for f, _ in schedule]
        if not schedule or fractions[0] != 0 or fractions != sorted(set(fractions)) or fractions[-1] >= 1:
            raise ValueError(
                'schedule must list (start fraction, rate) pairs with strictly increasing fractions in '
                f'[0, 1), the first at 0; got {schedule}'
            )
        if any(not 0 <= r < 1 for _, r in schedule):
            raise ValueError(f'drop-path rates must be in [0, 1), got {schedule}')
        self.schedule, self.module = schedule, module
        self.shares, self.rate = None, None  # (DropPath, share of the rate) pairs, set in before_run; the rate set

    def rate_at(self, progress: float) -> float:
        """The scheduled rate at ``progress`` (the fraction of ``max_iters`` done)."""
        return [r for f, r in self.schedule if f <= progress][-1]

    def before_run(self, runner) -> None:
        model = unwrap_model(runner.model)
        root = model.get_submodule(self.module) if self.module else model
        modules = drop_path_modules(root)
        top = max((m.drop_prob for m in modules), default=0.0)
        if top <= 0:
            raise ValueError(
                f'DropPathScheduleHook found no DropPath module with a positive rate in '
                f'{type(root).__name__} (model.{self.module or "<root>"}): build the backbone with '
                f'drop_path_rate > 0, e.g. the schedule\'s first rate {self.schedule[0][1]}'
            )
        self.shares = [(m, m.drop_prob / top) for m in modules]
        self.rate = None

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        rate = self.rate_at(runner.iter / runner.max_iters)
        if rate != self.rate:
            for module, share in self.shares:
                module.drop_prob = share * rate
            self.rate = rate
