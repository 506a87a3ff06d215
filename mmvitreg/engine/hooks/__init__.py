"""Training hooks of mmvitreg."""

from .bn_recalibration_hook import BNRecalibrationHook
from .drloc_weight_schedule_hook import DRLocWeightScheduleHook
from .drop_path_schedule_hook import DropPathScheduleHook, drop_path_modules
from .loss_guard_hook import LossGuardHook, NonFiniteLossError
from .rng_state_hook import RNGStateHook
from .unwrap import unwrap_model

__all__ = [
    'BNRecalibrationHook',
    'DRLocWeightScheduleHook',
    'DropPathScheduleHook',
    'LossGuardHook',
    'NonFiniteLossError',
    'RNGStateHook',
    'drop_path_modules',
    'unwrap_model',
]
