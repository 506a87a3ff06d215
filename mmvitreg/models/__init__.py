"""Models of mmvitreg: importing this package registers every component but those built on mmseg's and mmdet's
models (:mod:`.segmentors`, :mod:`.detectors`: :class:`~mmvitreg.registry.HostedRegistry` imports them)."""
from . import backbones, layers  # noqa: F401
from . import classifiers, data_preprocessors, heads, mixing  # noqa: F401
from . import losses, necks, target_transforms  # noqa: F401
