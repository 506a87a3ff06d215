"""Training machinery: checked checkpoints, the guarded runner, its hooks, mixed precision on any device."""
from .checkpoint import (AtomicLocalBackend, CheckpointError, KeyReport, load_state_dict_checked, read_checkpoint,
                         resume_candidates)
from .hooks import *  # noqa: F401,F403
from .optim_wrapper import AutocastOptimWrapper
from .runner import GuardedRunner

__all__ = ['AtomicLocalBackend', 'AutocastOptimWrapper', 'CheckpointError', 'GuardedRunner', 'KeyReport',
           'load_state_dict_checked', 'read_checkpoint', 'resume_candidates']
