"""The attention layers: they know rides and window layouts, not traces."""
import ast
from pathlib import Path

import mmvitreg.models.layers as layers


def imported_modules(path: Path, package):
    """Every module the file ``path`` of ``package`` (its dotted name as a list) imports, relative ones resolved."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = '.'.join(package[:len(package) + 1 - node.level] if node.level else [])
            module = '.'.join(filter(None, (base, node.module)))
            yield module
            yield from (f'{module}.{alias.name}' for alias in node.names)  # ``from .. import trace``


def test_no_layer_imports_the_trace():
    root = Path(layers.__file__).parent
    files = sorted(root.glob('**/*.py'))
    assert len(files) > 5
    for path in files:
        package = layers.__name__.split('.') + list(path.relative_to(root).parent.parts)
        bad = [m for m in imported_modules(path, package) if m.split('.')[:3] == ['mmvitreg', 'models', 'trace']]
        assert not bad, f'{path.name} imports {bad}'
