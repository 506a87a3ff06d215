"""Data sets and data transforms of mmvitreg (the digits sets are built by ``tools/dataset_converters/digits.py``)."""

from . import (  # noqa: F401
    label_map_geometry,
    label_map_store,
    label_maps,
    load_token_label_map,
    svhn,  # noqa: F401
    token_label_target,
)
