"""Training hooks of mmvitreg."""
from .bn_recalibration_hook import BNRecalibrationHook

__all__ = ['BNRecalibrationHook']
