"""Registries of the ``mmvitreg`` scope.

Every registry is a child of the matching mmengine root, so a config of mmpretrain, mmseg or mmdet
reaches a component as ``type='mmvitreg.Name'`` under its own ``default_scope`` with no
``custom_imports``: ``Registry.get('mmvitreg.X')`` imports this module, and the ``locations`` below
import the modules that register the components.

mmvitreg has no mmpretrain batch augment: its mixing plans (:class:`~mmvitreg.models.mixing.TokenMix`)
must reach the model, so they live in ``MODELS`` and are given as a ``TokenClassifier``'s
``train_cfg.token_mix``.
"""
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import WEIGHT_INITIALIZERS as MMENGINE_WEIGHT_INITIALIZERS
from mmengine.registry import Registry

MODELS = Registry('model', parent=MMENGINE_MODELS, scope='mmvitreg', locations=['mmvitreg.models'])
DATASETS = Registry('dataset', parent=MMENGINE_DATASETS, scope='mmvitreg', locations=['mmvitreg.datasets'])
TRANSFORMS = Registry(
    'transform', parent=MMENGINE_TRANSFORMS, scope='mmvitreg', locations=['mmvitreg.datasets'])
HOOKS = Registry('hook', parent=MMENGINE_HOOKS, scope='mmvitreg', locations=['mmvitreg.engine'])
OPTIM_WRAPPERS = Registry(
    'optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS, scope='mmvitreg', locations=['mmvitreg.engine'])
PARAM_SCHEDULERS = Registry(
    'parameter scheduler', parent=MMENGINE_PARAM_SCHEDULERS, scope='mmvitreg', locations=['mmvitreg.engine'])
RUNNERS = Registry('runner', parent=MMENGINE_RUNNERS, scope='mmvitreg', locations=['mmvitreg.engine'])
WEIGHT_INITIALIZERS = Registry(
    'weight initializer', parent=MMENGINE_WEIGHT_INITIALIZERS, scope='mmvitreg', locations=['mmvitreg.engine'])
