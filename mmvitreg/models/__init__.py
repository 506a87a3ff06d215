"""Models of mmvitreg; importing this package registers every component in ``mmvitreg.registry``."""
from . import backbones, layers  # noqa: F401
