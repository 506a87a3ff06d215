"""Engine components of mmvitreg (hooks)."""
from .hooks import *  # noqa
