"""Data sets and data transforms of mmvitreg."""
from . import digits  # noqa: F401
from . import svhn  # noqa: F401
from . import label_map_geometry, label_map_store, label_maps, load_token_label_map, token_label_target  # noqa: F401
