"""timm's ``CosineLRScheduler`` (the official DRLoc / TL-Align / DeiT codes' LR) as an mmengine scheduler."""

import math

from mmengine.optim.scheduler import CosineAnnealingLR

from mmvitreg.registry import PARAM_SCHEDULERS


@PARAM_SCHEDULERS.register_module()
class TimmCosineLR(CosineAnnealingLR):
    r"""The LR of timm's ``CosineLRScheduler`` (``warmup_prefix=False``, one cycle), in closed form, per group.

    timm lays the cosine over ``[0, T_max)`` from step 0 and lets a linear warm-up take its first ``W`` steps, so
    from step ``W`` on the LR is the cosine's value there, below the peak (mmengine's ``LinearLR`` +
    ``CosineAnnealingLR(begin=W)`` restarts the cosine at its peak). Every parameter group warms up from the same
    absolute ``warmup_lr_init`` ``w`` to its own base LR ``b``; ``eta_min`` is absolute too (timm's ``lr_min``). With
    ``t = max(step - delay, 0)``:

    .. math::
        lr_t = w + (b - w) \frac{t}{W} \ (t < W), \qquad
        lr_t = \eta_{min} + \frac{b - \eta_{min}}{2} \Big(1 + \cos\frac{\pi t}{T_{max}}\Big) \ (t \ge W)

    ``delay`` is the official loops' lateness: DeiT / TL-Align step timm's scheduler after each epoch, so epoch ``e``
    trains with the LR of epoch ``e - 1`` (``delay=1``). Closed form: it is meant to be the only scheduler of its
    parameter.

    Args:
        T_max (int): The cosine's period, from step 0 (timm's ``t_initial``).
        warmup (int): ``W`` warm-up steps (timm's ``warmup_t``). Defaults to 0.
        warmup_lr_init (float): The warm-up's first LR, the same for every group (the official scripts'
            ``--warmup-lr``). Defaults to 0 (timm's).
        delay (int): Steps by which the official loop applies the schedule late. Defaults to 0.
        **kwargs: As :class:`~mmengine.optim.CosineAnnealingLR` (``convert_to_iter_based`` also converts ``warmup``
            and ``delay``).
    """

    def __init__(self, optimizer, T_max: int, warmup: int = 0, warmup_lr_init: float = 0.0, delay: int = 0, **kwargs):
        if not 0 <= warmup < T_max or delay < 0:
            raise ValueError(
                f'TimmCosineLR needs 0 <= warmup < T_max and delay >= 0, got warmup={warmup}, '
                f'T_max={T_max}, delay={delay}'
            )
        self.warmup, self.warmup_lr_init, self.delay = warmup, warmup_lr_init, delay
        super().__init__(optimizer, T_max=T_max, **kwargs)

    @classmethod
    def build_iter_from_epoch(cls, *args, warmup: int = 0, delay: int = 0, epoch_length=None, **kwargs):
        """As mmengine's, converting ``warmup`` and ``delay`` from epochs to iterations as well."""
        return super().build_iter_from_epoch(
            *args, warmup=warmup * epoch_length, delay=delay * epoch_length, epoch_length=epoch_length, **kwargs
        )

    def _get_value(self) -> list:
        t, w = max(self.begin + self.last_step - self.delay, 0), self.warmup_lr_init
        if t < self.warmup:
            return [w + (base - w) * t / self.warmup for base in self.base_values]
        etas = [self.eta_min if self.eta_min_ratio is None else base * self.eta_min_ratio for base in self.base_values]
        cosine = (1 + math.cos(math.pi * t / self.T_max)) / 2
        return [eta + (base - eta) * cosine for base, eta in zip(self.base_values, etas)]
