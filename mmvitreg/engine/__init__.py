"""Training machinery: checked checkpoints (the loading design: :mod:`.checkpoint`), the guarded runner, its hooks,
mixed precision on any device."""

from .checkpoint import (
    AtomicLocalBackend,
    CheckpointError,
    KeyReport,
    fit,  # noqa: F401
    partial_loading,
    read_checkpoint,
)
from .hooks import *  # noqa
from .optim_wrapper import AutocastOptimWrapper, Float32Ops  # noqa: F401
from .runner import GuardedRunner, resume_candidates  # noqa: F401
from .timm_cosine_lr import TimmCosineLR  # noqa: F401
