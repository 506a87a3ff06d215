"""Registries of the ``mmvitreg`` scope: children of mmengine's roots, so a config of mmpretrain, mmseg or mmdet
reaches a component as ``type='mmvitreg.Name'`` under its own ``default_scope`` with no ``custom_imports``. The
models built on mmseg's and mmdet's classes are imported only when asked for (:class:`HostedRegistry`), so a
classification run imports nothing of mmseg and mmdet.
"""

import sys
from importlib import import_module
from typing import Sequence

import mmengine.registry as mmengine_registry
from mmengine.registry import Registry


class HostedRegistry(Registry):
    """A :class:`~mmengine.registry.Registry` that also imports ``host_locations`` (modules registering components
    built on another library's classes, e.g. ``['mmvitreg.models.segmentors']``) when :meth:`get` is asked for a
    name that neither it nor its parents hold."""

    def __init__(self, *args, host_locations: Sequence[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self._host_locations = list(host_locations)

    def get(self, key: str):
        found = super().get(key)
        if found is None and not all(location in sys.modules for location in self._host_locations):
            for location in self._host_locations:
                import_module(location)
            found = super().get(key)
        return found


MODELS = HostedRegistry(
    'model',
    parent=mmengine_registry.MODELS,
    scope='mmvitreg',
    locations=['mmvitreg.models'],
    host_locations=['mmvitreg.models.segmentors', 'mmvitreg.models.detectors'],
)
DATASETS = Registry('dataset', parent=mmengine_registry.DATASETS, scope='mmvitreg', locations=['mmvitreg.datasets'])
TRANSFORMS = Registry(
    'transform', parent=mmengine_registry.TRANSFORMS, scope='mmvitreg', locations=['mmvitreg.datasets']
)
HOOKS = Registry('hook', parent=mmengine_registry.HOOKS, scope='mmvitreg', locations=['mmvitreg.engine'])
MODEL_WRAPPERS = Registry(
    'model_wrapper', parent=mmengine_registry.MODEL_WRAPPERS, scope='mmvitreg', locations=['mmvitreg.utils']
)
OPTIM_WRAPPERS = Registry(
    'optim_wrapper', parent=mmengine_registry.OPTIM_WRAPPERS, scope='mmvitreg', locations=['mmvitreg.engine']
)
PARAM_SCHEDULERS = Registry(
    'parameter scheduler', parent=mmengine_registry.PARAM_SCHEDULERS, scope='mmvitreg', locations=['mmvitreg.engine']
)
RUNNERS = Registry('runner', parent=mmengine_registry.RUNNERS, scope='mmvitreg', locations=['mmvitreg.engine'])
WEIGHT_INITIALIZERS = Registry(
    'weight initializer', parent=mmengine_registry.WEIGHT_INITIALIZERS, scope='mmvitreg', locations=['mmvitreg.engine']
)
