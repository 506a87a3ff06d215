"""The official DRLoc λ schedule: a linear warm-up, then a linear decay, set per epoch."""

from typing import Dict

from mmengine.hooks import Hook
from mmengine.runner import EpochBasedTrainLoop

from mmvitreg.registry import HOOKS

from .unwrap import unwrap_model


@HOOKS.register_module()
class DRLocWeightScheduleHook(Hook):
    r"""Set the weight λ of every :class:`~mmvitreg.models.losses.DRLoc` of the model at each epoch.

    Official code only (yhlleo/VTs-Drloc ``main.py: _weight_decay``, before every epoch); the paper uses a fixed λ
    (no hook). With the configured weight ``λ`` and the 0-based epoch ``e``:

    .. math::
        λ_e = λ \frac{e}{W} \ (e \le W), \qquad λ_e = λ \Big(1 - \frac{e - W}{T - W}\Big) \ (e > W)

    ``W = warmup_epochs`` (official ``ssl_warmup_epochs`` 20), ``T = total_epochs`` (official ``--total_epochs``,
    the LR schedule's length, 300). λ is constant within an epoch, 0 in epoch 0, and computed from the configured
    weights, read before training (so a resumed run continues the schedule). A model without DRLoc (a baseline,
    ``model.aux_losses=[]``) trains unchanged, with one warning.

    Args:
        warmup_epochs (int): ``W``. Defaults to 20.
        total_epochs (int): ``T``. Defaults to 300.
    """

    priority = 'NORMAL'

    def __init__(self, warmup_epochs: int = 20, total_epochs: int = 300):
        if not 0 < warmup_epochs < total_epochs:
            raise ValueError(f'need 0 < warmup_epochs < total_epochs, got {warmup_epochs} and {total_epochs}')
        self.warmup_epochs, self.total_epochs = warmup_epochs, total_epochs
        self._base: Dict[object, float] = {}

    def factor(self, epoch: int) -> float:
        """``λ_e / λ`` at 0-based epoch ``epoch``."""
        if epoch <= self.warmup_epochs:
            return epoch / self.warmup_epochs
        return 1 - (epoch - self.warmup_epochs) / (self.total_epochs - self.warmup_epochs)

    def before_train(self, runner) -> None:
        from mmvitreg.models.losses import DRLoc

        model = unwrap_model(runner.model)
        if not isinstance(runner.train_loop, EpochBasedTrainLoop):
            raise TypeError(
                'DRLocWeightScheduleHook sets λ per epoch: use an epoch-based train loop '
                "(train_cfg=dict(by_epoch=True, ...))"
            )
        self._base = {m: m.loss_weight for m in model.modules() if isinstance(m, DRLoc)}
        if not self._base:
            runner.logger.warning(
                'DRLocWeightScheduleHook: the model has no mmvitreg.DRLoc (a baseline run, e.g. '
                'model.aux_losses=[]): no λ to schedule'
            )

    def before_train_epoch(self, runner) -> None:
        for loss, weight in self._base.items():
            loss.loss_weight = weight * self.factor(runner.epoch)
