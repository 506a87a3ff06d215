"""Models of mmvitreg: importing this package registers every component but those built on mmseg's and mmdet's
models (:mod:`.segmentors`, :mod:`.detectors`: :class:`~mmvitreg.registry.HostedRegistry` imports them)."""

from . import backbones, classifiers, data_preprocessors, heads, layers, losses, mixing, necks, target_transforms  # noqa: F401  # noqa: F401  # noqa: F401
