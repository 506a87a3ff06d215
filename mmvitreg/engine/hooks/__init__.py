from .loss_guard_hook import LossGuardHook, NonFiniteLossError
from .rng_state_hook import RNGStateHook, capture_rng_state, restore_rng_state

__all__ = ['LossGuardHook', 'NonFiniteLossError', 'RNGStateHook', 'capture_rng_state', 'restore_rng_state']
