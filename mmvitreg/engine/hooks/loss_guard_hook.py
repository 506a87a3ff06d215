"""Stop training at the first non-finite loss, naming the iteration and the loss term."""

import math

import torch
from mmengine.dist import all_reduce, get_world_size
from mmengine.hooks import Hook

from mmvitreg.registry import HOOKS

from .drop_path_schedule_hook import drop_path_modules
from .unwrap import unwrap_model

#: a stochastic-depth rate from which the hint names drop path first: the kept branches are scaled by at least 2x
LARGE_DROP_PATH_RATE = 0.5


class NonFiniteLossError(RuntimeError):
    """A loss term became NaN or infinite; the message names the iteration and the term."""


@HOOKS.register_module()
class LossGuardHook(Hook):
    """Stops the run at the first iteration whose loss is NaN or infinite.

    Without it mmengine keeps stepping with NaN gradients and saves NaN weights. This hook reads the logged loss terms
    of every training iteration and raises :class:`NonFiniteLossError` naming the iteration (1-based, as the logger
    counts), the epoch, every non-finite term, the last checkpoint whose weights are all finite (:meth:`last_finite`)
    and what to try (:meth:`hint`), before any later hook (logger, checkpoint) runs. In a distributed run every rank
    stops at the same iteration (the finding is all-reduced).

    Not mmdet's ``CheckInvalidLossHook``: it ``assert``s (gone under ``python -O``) the total loss every 50 iterations,
    on one rank, naming no term; and mmdet is no dependency of a classification install.
    """

    priority = 'VERY_HIGH'

    @staticmethod
    def non_finite_terms(outputs: dict) -> dict:
        """``{name: value}`` of the non-finite loss terms in ``outputs`` (``loss``, the total, only if no other)."""
        bad = {}
        for name, value in (outputs or {}).items():
            if 'loss' not in name:
                continue
            value = float(value.detach().float().mean()) if isinstance(value, torch.Tensor) else float(value)
            if not math.isfinite(value):
                bad[name] = value
        if len(bad) > 1:
            bad.pop('loss', None)
        return bad

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        bad = self.non_finite_terms(outputs)
        if get_world_size() > 1:
            flag = torch.tensor([float(bool(bad))])
            all_reduce(flag, op='max')
            if flag.item() and not bad:
                raise NonFiniteLossError(
                    f'iteration {runner.iter + 1} (epoch {runner.epoch + 1}): another '
                    'rank reported a non-finite loss; the run stops'
                )
        if bad:
            terms = ', '.join(f'{name} = {value}' for name, value in bad.items())
            raise NonFiniteLossError(
                f'non-finite loss at iteration {runner.iter + 1} (epoch {runner.epoch + 1}): {terms}; the run stops '
                f'before this step is logged or checkpointed; {self.last_finite(runner)} ({self.hint(runner.model)})'
            )

    @staticmethod
    def last_finite(runner) -> str:
        """Where to go on from: the runner's ``last_finite_checkpoint`` (:class:`~mmvitreg.engine.GuardedRunner`'s;
        another runner's files are not known to be sound)."""
        if not hasattr(runner, 'last_finite_checkpoint'):
            return 'this runner writes checkpoints unchecked: check their weights before resuming'
        if not runner.last_finite_checkpoint:
            return 'this run has no resumable checkpoint yet'
        return f'the last resumable checkpoint with finite weights is {runner.last_finite_checkpoint}'

    @staticmethod
    def hint(model) -> str:
        """What to try, drop path first when the model's largest ``DropPath`` rate is large."""
        hint = 'lower the learning rate, check the data of this batch, or clip gradients: optim_wrapper.clip_grad'
        rate = max((m.drop_prob for m in drop_path_modules(unwrap_model(model))), default=0.0)
        if rate >= LARGE_DROP_PATH_RATE:
            hint = (
                f'the model drops residual branches with rates up to {rate:g} and scales the kept ones by '
                f'1 / (1 - rate): lower the backbone\'s drop_path_rate (ViTs train with 0.1-0.5); or {hint}'
            )
        return hint
