"""Models of mmvitreg; importing this package registers every component in ``mmvitreg.registry`` except those
built on mmseg's and mmdet's models (:mod:`.segmentors`, :mod:`.detectors`), which ``MODELS`` imports when one of
their names is asked for (:class:`~mmvitreg.registry.HostedRegistry`), so that classification imports no more
of them than mmpretrain does."""
from . import backbones, layers  # noqa: F401
from . import classifiers, data_preprocessors, heads, mixing  # noqa: F401
from . import losses, necks, target_transforms  # noqa: F401
