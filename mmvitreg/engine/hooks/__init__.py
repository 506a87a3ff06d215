"""Training hooks of mmvitreg."""
from .bn_recalibration_hook import BNRecalibrationHook
from .drloc_weight_schedule_hook import DRLocWeightScheduleHook
from .loss_guard_hook import LossGuardHook, NonFiniteLossError
from .rng_state_hook import RNGStateHook, capture_rng_state, restore_rng_state

__all__ = ['BNRecalibrationHook', 'DRLocWeightScheduleHook', 'LossGuardHook', 'NonFiniteLossError', 'RNGStateHook', 'capture_rng_state',
           'restore_rng_state']
