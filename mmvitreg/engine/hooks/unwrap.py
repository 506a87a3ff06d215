"""The model a hook acts on, found through the wrappers mmengine puts around it."""

from mmengine.model import BaseTTAModel, is_model_wrapper
from torch import nn


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside every distributed wrapper (``DistributedDataParallel``, mmengine's wrappers)
    and test-time-augmentation wrapper (mmseg's ``SegTTAModel``, mmpretrain's ``AverageClsScoreTTA``,
    mmdet's ``DetTTAModel``), each of which holds it as ``.module``: the model whose ``backbone`` a
    hook reads, also under ``tools/test.py --tta``."""
    while is_model_wrapper(model) or isinstance(model, BaseTTAModel):
        model = model.module
    return model
