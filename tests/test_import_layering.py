"""The package's import plan: no circle, and no module importing one of a layer above it.

Every import of a module of mmvitreg (at the top of a file or inside a function: a lazy import is a dependency
too) is read from the source. The layers, bottom up:

0. ``registry``, ``fileio``, ``compat``, ``mmcv_ops``: what every other part stands on (the allow-listed reader and
   the atomic writer, which the data sets and the engine share; the workarounds import nothing of the package but
   ``fileio``, and the loader of :data:`UPWARD` when mmengine first loads an mmvitreg model; the stand-in for mmcv's
   compiled ops imports nothing of it)
1. ``datasets``: transforms and data sets
2. ``models.layers``, ``models.converters`` (release layouts, registered by the backbones), ``models.unavailable``
3. ``models.trace``: capabilities, mixing plans, the token trace
4. the components: ``models.backbones``, ``mixing``, ``losses``, ``heads``, ``target_transforms``, ``necks``,
   ``data_preprocessors`` and ``models.trace_users`` (the composition skeleton)
5. the composed models: ``models.classifiers``, ``segmentors``, ``detectors`` and ``mmvitreg.models`` itself
6. ``engine``: runner, loading, hooks, optimizer wrappers, schedulers
7. ``utils`` and ``mmvitreg`` itself: what the tools use
"""

import ast
from pathlib import Path

import pytest

import mmvitreg

ROOT = Path(mmvitreg.__file__).parent
LAYERS = (
    ('mmvitreg.registry', 'mmvitreg.fileio', 'mmvitreg.compat', 'mmvitreg.mmcv_ops'),
    ('mmvitreg.datasets',),
    ('mmvitreg.models.layers', 'mmvitreg.models.converters', 'mmvitreg.models.unavailable'),
    ('mmvitreg.models.trace',),
    (
        'mmvitreg.models.backbones',
        'mmvitreg.models.mixing',
        'mmvitreg.models.losses',
        'mmvitreg.models.heads',
        'mmvitreg.models.target_transforms',
        'mmvitreg.models.necks',
        'mmvitreg.models.data_preprocessors',
        'mmvitreg.models.trace_users',
    ),
    ('mmvitreg.models.classifiers', 'mmvitreg.models.segmentors', 'mmvitreg.models.detectors', 'mmvitreg.models'),
    ('mmvitreg.engine',),
    ('mmvitreg.utils', 'mmvitreg'),
)


#: the one import up the layers, inside the function that needs it (no circle: the engine imports no workaround)
UPWARD = {
    (
        'mmvitreg.compat',
        'mmvitreg.engine.checkpoint',
    ): "mmengine's loaders hand a model holding an mmvitreg module to the loader's fill_model"
}


def modules():
    """``{dotted name: path}`` of every module of the package (a package by its ``__init__``)."""
    found = {}
    for path in ROOT.rglob('*.py'):
        parts = ['mmvitreg', *path.relative_to(ROOT).with_suffix('').parts]
        found['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = path
    return found


def imports(name, path, known):
    """The package's modules that ``name`` (at ``path``) imports, each resolved to the module that holds it."""
    package = name.split('.') if path.name == '__init__.py' else name.split('.')[:-1]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = '.'.join(package[: len(package) + 1 - node.level]) if node.level else ''
            module = '.'.join(filter(None, (base, node.module)))
            names = [module] + [f'{module}.{alias.name}' for alias in node.names]
        else:
            continue
        for target in names:
            while target not in known and '.' in target:
                target = target.rsplit('.', 1)[0]
            if target in known and target != name:
                targets.add(target)
    return targets


def layer(name):
    """The index of ``name``'s layer: the one with the longest prefix of it."""
    matches = [
        (len(prefix), i)
        for i, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if name == prefix or name.startswith(prefix + '.')
    ]
    assert matches, f'{name} is in no layer: add it to LAYERS'
    return max(matches)[1]


@pytest.fixture(scope='module')
def graph():
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_module_imports_a_layer_above_its_own(graph):
    upward = [
        f'{name} (layer {layer(name)}) imports {target} (layer {layer(target)})'
        for name, targets in graph.items()
        for target in sorted(targets)
        if layer(target) > layer(name) and (name, target) not in UPWARD
    ]
    assert not upward, '\n'.join(upward)


def test_the_imports_have_no_circle(graph):
    state, path, circles = {}, [], []

    def visit(name):
        state[name] = 'open'
        path.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 'open':
                circles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[name] = 'done'

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not circles, '\n'.join(' -> '.join(c) for c in circles)


def test_the_checks_see_an_upward_import_and_a_circle():
    """The two checks can fail: a made-up graph with an upward import and a circle trips both."""
    assert layer('mmvitreg.models.layers.ride') < layer('mmvitreg.engine.checkpoint')
    fake = {
        'mmvitreg.models.layers.ride': {'mmvitreg.engine.checkpoint'},
        'mmvitreg.engine.checkpoint': {'mmvitreg.models.layers.ride'},
    }
    with pytest.raises(AssertionError, match='imports mmvitreg.engine.checkpoint'):
        test_no_module_imports_a_layer_above_its_own(fake)
    with pytest.raises(AssertionError, match='checkpoint -> mmvitreg.models.layers.ride -> mmvitreg.engine.checkpoint'):
        test_the_imports_have_no_circle(fake)
