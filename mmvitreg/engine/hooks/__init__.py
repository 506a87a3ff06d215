"""Training hooks of mmvitreg."""
from .bn_recalibration_hook import BNRecalibrationHook
from .drop_path_schedule_hook import DropPathScheduleHook, drop_path_modules
from .loss_guard_hook import LossGuardHook, NonFiniteLossError
from .rng_state_hook import RNGStateHook, capture_rng_state, restore_rng_state

__all__ = ['BNRecalibrationHook', 'LossGuardHook', 'NonFiniteLossError', 'RNGStateHook', 'capture_rng_state',
           'restore_rng_state', 'DropPathScheduleHook', 'drop_path_modules']
