"""Data sets and data transforms of mmvitreg (the digits sets are built by ``tools/dataset_converters/digits.py``)."""
from . import svhn  # noqa: F401
from . import label_map_geometry, label_map_store, label_maps, load_token_label_map, token_label_target  # noqa: F401
