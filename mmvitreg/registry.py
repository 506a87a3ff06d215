"""Registries of the ``mmvitreg`` scope.

Every registry is a child of the matching mmengine root, so a config of mmpretrain, mmseg or mmdet
reaches a component as ``type='mmvitreg.Name'`` under its own ``default_scope`` with no
``custom_imports``: ``Registry.get('mmvitreg.X')`` imports this module, and the ``locations`` below
import the modules that register the components.

mmpretrain's ``BATCH_AUGMENTS`` has no mmengine parent, so ours is a child of it: an mmpretrain
``ClsDataPreprocessor(batch_augments=dict(augments=[dict(type='mmvitreg.X')]))`` finds our augments.
"""
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import Registry
from mmpretrain.registry import BATCH_AUGMENTS as MMPRETRAIN_BATCH_AUGMENTS

MODELS = Registry('model', parent=MMENGINE_MODELS, scope='mmvitreg', locations=['mmvitreg.models'])
BATCH_AUGMENTS = Registry(
    'batch augment', parent=MMPRETRAIN_BATCH_AUGMENTS, scope='mmvitreg', locations=['mmvitreg.models'])
DATASETS = Registry('dataset', parent=MMENGINE_DATASETS, scope='mmvitreg', locations=['mmvitreg.datasets'])
TRANSFORMS = Registry(
    'transform', parent=MMENGINE_TRANSFORMS, scope='mmvitreg', locations=['mmvitreg.datasets'])
HOOKS = Registry('hook', parent=MMENGINE_HOOKS, scope='mmvitreg', locations=['mmvitreg.engine'])
