"""The digits study behind ``docs/claims.md`` (see :mod:`.core`); one module per technique section.

Every module of this package other than ``core`` is imported here, so a section registers itself
(:func:`~.core.register_section`) by being a file in this folder: no list to edit.
"""

import importlib
import pkgutil

from .core import (
    Context,
    Run,
    Section,
    accuracy_table,
    assemble,
    figure,
    fmt_mean_std,
    markdown_table,
    mean_std,
    register_section,
    run_sections,
    sections,
    verdict,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != 'core':
        importlib.import_module(f'{__name__}.{_module.name}')

__all__ = [
    'Context',
    'Run',
    'Section',
    'accuracy_table',
    'assemble',
    'figure',
    'fmt_mean_std',
    'markdown_table',
    'mean_std',
    'register_section',
    'run_sections',
    'sections',
    'verdict',
]
