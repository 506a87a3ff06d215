"""Models of mmvitreg; importing this package registers every component in ``mmvitreg.registry``."""
from . import backbones, layers  # noqa: F401
from . import classifiers, data_preprocessors, heads, mixing  # noqa: F401  (token labeling: H4b)
from . import losses, necks, target_transforms  # noqa: F401
from . import detectors, segmentors  # noqa: F401  (the token losses in mmdet and mmseg models)
