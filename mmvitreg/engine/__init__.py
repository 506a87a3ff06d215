"""Training machinery: checked checkpoints, the guarded runner, its hooks, mixed precision on any device."""
from .checkpoint import (AtomicLocalBackend, CheckpointError, KeyReport, load_state_dict_checked,  # noqa: F401
                         partial_loading, read_checkpoint, resume_candidates)
from .hooks import *  # noqa
from .optim_wrapper import AutocastOptimWrapper, Float32Ops  # noqa: F401
from .runner import GuardedRunner  # noqa: F401
from .timm_cosine_lr import TimmCosineLR  # noqa: F401
