"""Mutation score of mmvitreg modules under their tests: do the tests fail when the code is wrong?

Each *mutant* is the module with one small change made on its syntax tree: an arithmetic operator swapped
(``+``/``-``, ``*``/``/``, ``**``/``*``), a comparison flipped (``<``/``<=``, ``==``/``!=``, ``is``/``is not``,
``in``/``not in``), ``and``/``or`` swapped, a ``not`` or unary minus dropped, a number changed (``n`` -> ``n + 1``),
a boolean flipped, a reduction swapped (``.mean``/``.sum``, ``.max``/``.min``, ``softmax``/``log_softmax``), a
``.detach()`` / ``.abs()`` dropped, an ``if`` condition negated, or a statement removed (a ``raise``, a call
statement, an augmented assignment). Docstrings, f-string messages, annotations and lines marked
``# pragma: no mutate`` are not mutated.

A mutant is *killed* when the tests fail (or time out) with it loaded in place of the module, *survives*
when they pass. The score is killed / all mutants, where a mutant on a line no test executes counts as a
survivor (``no cov``) without being run. The tests run one mutant at a time, in a child forked from a
process that has already imported torch and the OpenMMLab hosts (so a mutant costs its tests, not the
imports); the child loads the mutated source through an import hook (no file is written). A baseline run
records, with ``sys.settrace``, which tests execute each line of the module; a mutant first runs only the
tests that reach its statement (``pytest -x``), and a survivor is confirmed on the whole test files.

Usage (from the repository root; see ``docs/mutation.md``)::

    OMP_NUM_THREADS=1 nice -n 10 python tools/misc/mutation_score.py \\
        mmvitreg/models/losses/patch_cosine_loss.py --tests tests/test_diversepatch_losses.py \\
        --max-mutants 50 --json work_dirs/mutation/losses.json

prints a score table per module and every survivor as ``file:line  kind  `before` -> `after```.
"""

import argparse
import ast
import importlib.abc
import importlib.util
import json
import os
import random
import shlex
import signal
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Set

REPO = Path(__file__).resolve().parents[2]

BINOPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Pow: ast.Mult,
}
CMPOPS = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
ATTRS = {
    'mean': 'sum',
    'sum': 'mean',
    'max': 'min',
    'min': 'max',
    'amax': 'amin',
    'amin': 'amax',
    'argmax': 'argmin',
    'argmin': 'argmax',
    'softmax': 'log_softmax',
    'log_softmax': 'softmax',
}
DROPPED_CALLS = ('detach', 'abs')  # ``x.detach()`` -> ``x``
NO_MUTATE = 'pragma: no mutate'


@dataclass
class Mutant:
    """One change: the ``index``-th node of ``ast.walk`` (in the module's tree) gets ``kind``."""

    module: str
    index: int
    kind: str
    line: int
    stmt_lines: List[int]
    before: str
    after: str = ''
    status: str = ''  # killed | timeout | survived | no cov
    tests_run: int = 0


def _skipped_nodes(tree: ast.Module, lines: List[str]) -> Set[int]:
    """ids of nodes never mutated: docstrings, f-strings, annotations, ``__all__``, marked lines."""
    skip: Set[int] = set()

    def drop(node):
        skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                drop(first)
        if isinstance(node, ast.JoinedStr):
            drop(node)
        if isinstance(node, ast.arg) and node.annotation is not None:
            drop(node.annotation)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            drop(node.returns)
        if isinstance(node, ast.AnnAssign):
            drop(node.annotation)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == '__all__' for t in node.targets):
            drop(node)
        if isinstance(node, ast.If) and 'TYPE_CHECKING' in ast.unparse(node.test):
            drop(node)
        if hasattr(node, 'lineno') and NO_MUTATE in lines[node.lineno - 1]:
            drop(node)
    return skip


def _kinds(node: ast.AST) -> List[str]:
    """The mutations that apply to ``node``."""
    kinds = []
    if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
        kinds.append('binop')
    elif isinstance(node, ast.AugAssign):
        kinds += (['binop'] if type(node.op) in BINOPS else []) + ['remove']
    elif isinstance(node, ast.Compare):
        kinds += [f'cmp{i}' for i, op in enumerate(node.ops) if type(op) in CMPOPS]
    elif isinstance(node, ast.BoolOp):
        kinds.append('boolop')
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        kinds.append('unary')
    elif (
        isinstance(node, ast.Constant)
        and not isinstance(node.value, (str, bytes))
        and node.value is not None
        and node.value is not Ellipsis
        and not isinstance(node.value, complex)
    ):
        kinds.append('const')
    elif isinstance(node, ast.Attribute) and node.attr in ATTRS:
        kinds.append('attr')
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in DROPPED_CALLS
        and not node.args
        and not node.keywords
    ):
        kinds.append('dropcall')
    elif isinstance(node, ast.If):
        kinds.append('negate')
    elif isinstance(node, ast.Raise) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        kinds.append('remove')
    return kinds


def _parents(tree: ast.AST) -> Dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _statement(node: ast.AST, parents: Dict[int, ast.AST]) -> ast.AST:
    while not isinstance(node, ast.stmt):
        node = parents[id(node)]
    return node


def _apply(tree: ast.Module, index: int, kind: str) -> ast.AST:
    """Mutate ``tree`` in place; returns the node to show (or a ``Pass`` for a removed statement)."""
    nodes = list(ast.walk(tree))
    node = nodes[index]
    if kind == 'binop':
        node.op = BINOPS[type(node.op)]()
    elif kind.startswith('cmp'):
        i = int(kind[3:])
        node.ops[i] = CMPOPS[type(node.ops[i])]()
    elif kind == 'boolop':
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == 'unary':
        return _replace(tree, node, node.operand)
    elif kind == 'const':
        v = node.value
        node.value = (not v) if isinstance(v, bool) else (v + 1 if isinstance(v, int) else v + 1.0)
    elif kind == 'attr':
        node.attr = ATTRS[node.attr]
    elif kind == 'dropcall':
        return _replace(tree, node, node.func.value)
    elif kind == 'negate':
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
        return node.test
    elif kind == 'remove':
        return _replace(tree, node, ast.Pass())
    return node


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> ast.AST:
    parent = _parents(tree)[id(old)]
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
        elif isinstance(value, list):
            parent.__dict__[field] = [new if v is old else v for v in value]
    return new


def _short(text: str, limit: int = 90) -> str:
    text = ' '.join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + '...'


def enumerate_mutants(path: Path) -> List[Mutant]:
    """Every mutant of the module at ``path``, in line order."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    skip = _skipped_nodes(tree, lines)
    parents = _parents(tree)
    rel = str(path.relative_to(REPO))
    mutants = []
    for index, node in enumerate(ast.walk(tree)):
        if id(node) in skip or isinstance(node, ast.Module):
            continue
        for kind in _kinds(node):
            stmt = _statement(node, parents)
            # a compound statement's own lines are its header (its body's statements are mutants of their own)
            end = (
                stmt.body[0].lineno - 1
                if hasattr(stmt, 'body') and isinstance(stmt.body, list) and isinstance(stmt.body[0], ast.stmt)
                else stmt.end_lineno
            )
            shown = node.test if kind == 'negate' else node
            mutant = Mutant(
                rel,
                index,
                kind,
                node.lineno,
                list(range(stmt.lineno, max(end, stmt.lineno) + 1)),
                _short(ast.get_source_segment(source, shown) or ast.unparse(shown)),
            )
            shown = _apply(ast.parse(source), index, kind)
            mutant.after = _short(ast.unparse(shown))
            mutants.append(mutant)
    return sorted(mutants, key=lambda m: (m.line, m.index, m.kind))


def mutated_source(path: Path, mutant: Optional[Mutant]) -> str:
    source = path.read_text()
    if mutant is None:
        return source
    tree = ast.parse(source)
    _apply(tree, mutant.index, mutant.kind)
    return ast.unparse(ast.fix_missing_locations(tree))


class _SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports module ``name`` from ``source`` instead of its file (compiled under the file's name)."""

    def __init__(self, name: str, path: Path, source: str):
        self.name, self.path, self.source = name, path, source

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        package = [str(self.path.parent)] if self.path.name == '__init__.py' else None
        return importlib.util.spec_from_file_location(
            fullname, self.path, loader=self, submodule_search_locations=package
        )

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(self.source, str(self.path), 'exec'), module.__dict__)


class _Recorder:
    """pytest plugin + trace function: which test (node id) executes which line of the files."""

    IMPORT = '<import>'  # collection, module and session set-up: a mutant there runs the whole files

    def __init__(self, filenames: List[str]):
        self.current = self.IMPORT
        self.lines: Dict[str, Dict[int, Set[str]]] = {f: defaultdict(set) for f in filenames}

    def pytest_runtest_logstart(self, nodeid, location):
        self.current = nodeid

    def pytest_runtest_logfinish(self, nodeid, location):
        self.current = self.IMPORT

    def trace(self, frame, event, arg):
        lines = self.lines.get(frame.f_code.co_filename)
        if lines is None:
            return None

        def line(frame, event, arg):
            if event == 'line':
                lines[frame.f_lineno].add(self.current)
            return line

        lines[frame.f_lineno].add(self.current)
        return line


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix('').parts)
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def run_child(
    tests: List[str],
    timeout: float,
    log: Path,
    pytest_args: List[str] = (),
    mutated: Optional[tuple] = None,
    coverage: Optional[tuple] = None,
) -> str:
    """Run pytest on ``tests`` in a forked child: 'passed', 'failed' or 'timeout'.

    ``mutated``: ``(path, source)``, the module imported from ``source``; ``coverage``: ``(paths, json_file)``,
    record which test executes which line of ``paths`` into ``json_file``.
    """
    pid = os.fork()
    if pid == 0:  # child
        rc = 3
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            if mutated is not None:
                sys.meta_path.insert(0, _SourceFinder(module_name(mutated[0]), *mutated))
            import pytest

            plugins = []
            if coverage is not None:
                recorder = _Recorder([str(p) for p in coverage[0]])
                plugins.append(recorder)
                sys.settrace(recorder.trace)
            rc = int(pytest.main(['-x', '-q', '-p', 'no:cacheprovider', *pytest_args, *tests], plugins=plugins))
            sys.settrace(None)
            if coverage is not None:
                coverage[1].write_text(
                    json.dumps({f: {n: sorted(ids) for n, ids in lines.items()} for f, lines in recorder.lines.items()})
                )
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return 'passed' if os.waitstatus_to_exitcode(status) == 0 else 'failed'
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return 'timeout'
        time.sleep(0.05)


def sample(path: Path, max_mutants: int, seed: int) -> List[Mutant]:
    """The mutants of ``path`` to run: all, or a sample of ``max_mutants`` fixed by ``seed`` and the module."""
    mutants = enumerate_mutants(path)
    if max_mutants and len(mutants) > max_mutants:
        rng = random.Random(f'{seed}:{module_name(path)}')
        mutants = [mutants[i] for i in sorted(rng.sample(range(len(mutants)), max_mutants))]
    return mutants


def score_module(
    path: Path,
    mutants: List[Mutant],
    coverage: Dict[int, Set[str]],
    tests: List[str],
    limit: float,
    logdir: Path,
    pytest_args: List[str] = (),
    killed: Set[tuple] = frozenset(),
):
    """Run the mutants of one module one at a time; sets their status (``killed``: (index, kind) of mutants
    known killed by a previous run, not run again)."""
    for n, mutant in enumerate(mutants, 1):
        ids = set().union(*(coverage.get(line, set()) for line in mutant.stmt_lines))
        if (mutant.index, mutant.kind) in killed:
            mutant.status = 'killed'
        elif not ids:
            mutant.status = 'no cov'
        else:
            source = mutated_source(path, mutant)
            selected = tests if _Recorder.IMPORT in ids else sorted(ids)
            mutant.tests_run = len(selected)
            log = logdir / f'{module_name(path)}-{mutant.index}-{mutant.kind}.log'
            result = run_child(selected, limit, log, pytest_args, mutated=(path, source))
            if result == 'passed' and selected is not tests:  # confirm on the whole files
                result = run_child(tests, limit, log, pytest_args, mutated=(path, source))
            mutant.status = {'passed': 'survived', 'failed': 'killed', 'timeout': 'timeout'}[result]
            if mutant.status != 'survived':
                log.unlink(missing_ok=True)
        print(
            f'  [{n}/{len(mutants)}] {mutant.status:8s} {mutant.module}:{mutant.line} {mutant.kind} '
            f'`{mutant.before}` -> `{mutant.after}`',
            flush=True,
        )


def summary(results: Dict[str, dict]) -> str:
    rows = ['| module | mutants | run | killed | survived | no cov | score |', '|---|---|---|---|---|---|---|']
    for module, r in results.items():
        ms = r['mutants']
        killed = sum(m['status'] in ('killed', 'timeout') for m in ms)
        survived = sum(m['status'] == 'survived' for m in ms)
        nocov = sum(m['status'] == 'no cov' for m in ms)
        score = f'{100 * killed / len(ms):.0f}%' if ms else '-'
        rows.append(f"| {module} | {r['total']} | {len(ms)} | {killed} | {survived} | {nocov} | {score} |")
    surv = [
        f"{m['module']}:{m['line']}  {m['kind']}  `{m['before']}` -> `{m['after']}`  ({m['status']})"
        for r in results.values()
        for m in r['mutants']
        if m['status'] in ('survived', 'no cov')
    ]
    return '\n'.join(rows + ['', 'survivors:'] + (surv or ['(none)']))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument('modules', nargs='+', type=Path, help='module files (e.g. mmvitreg/models/losses/drloc.py)')
    parser.add_argument('--tests', nargs='+', required=True, help='the test files that exercise the modules')
    parser.add_argument(
        '--max-mutants',
        type=int,
        default=50,
        help='per module, a deterministic sample of this many (0: all). Defaults to 50',
    )
    parser.add_argument('--seed', type=int, default=0, help='seed of the sample. Defaults to 0')
    parser.add_argument(
        '--timeout',
        type=float,
        default=None,
        help='seconds per mutant run. Defaults to twice the (traced) baseline + 20 s',
    )
    parser.add_argument(
        '--pytest-args', default='', help="more pytest options, e.g. -k 'not trains' to leave out slow tests"
    )
    parser.add_argument(
        '--preimport',
        default='torch,mmengine,mmpretrain.models',
        help='modules the parent imports once before forking (never mmvitreg)',
    )
    parser.add_argument('--list', action='store_true', help='list the (sampled) mutants and exit, running nothing')
    parser.add_argument(
        '--rerun',
        type=Path,
        default=None,
        help='the --json of an earlier run with the same sample: run only its survivors (the tests '
        'only grew, so its killed mutants stay killed)',
    )
    parser.add_argument('--json', type=Path, default=None, help='write every mutant and its status here')
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.modules]
    for p in paths:
        if not p.is_file() or REPO not in p.parents:
            parser.error(f'{p} is not a module file of this repository')
    if args.list:
        for p in paths:
            for m in sample(p, args.max_mutants, args.seed):
                print(f'{m.module}:{m.line}  {m.kind}  `{m.before}` -> `{m.after}`')
        return
    os.chdir(REPO)
    sys.path.insert(0, str(REPO))
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    for name in filter(None, args.preimport.split(',')):
        __import__(name)
    if any(name == 'mmvitreg' or name.startswith('mmvitreg.') for name in sys.modules):
        raise SystemExit('--preimport imported mmvitreg; the mutants must be imported after the fork')
    pytest_args = shlex.split(args.pytest_args)
    earlier = json.loads(args.rerun.read_text()) if args.rerun else {}
    results = {}
    with tempfile.TemporaryDirectory(prefix='mutation-') as tmp:
        logdir = Path(tmp)
        t0 = time.monotonic()
        base = run_child(
            args.tests, 3600, logdir / 'baseline.log', pytest_args, coverage=(paths, logdir / 'coverage.json')
        )
        base_time = time.monotonic() - t0
        if base != 'passed':
            log = (logdir / 'baseline.log').read_text()
            raise SystemExit(f'the tests fail on the unmutated modules; fix them first:\n{log[-3000:]}')
        coverage = json.loads((logdir / 'coverage.json').read_text())
        limit = args.timeout or 2 * base_time + 20
        for p in paths:
            mutants = sample(p, args.max_mutants, args.seed)
            total = len(enumerate_mutants(p))
            print(
                f'{module_name(p)}: {total} mutants, running {len(mutants)}; baseline {base_time:.1f} s, '
                f'timeout {limit:.0f} s',
                flush=True,
            )
            lines = {int(n): set(ids) for n, ids in coverage[str(p)].items()}
            killed = {
                (m['index'], m['kind'])
                for m in earlier.get(module_name(p), {}).get('mutants', [])
                if m['status'] in ('killed', 'timeout')
            }
            score_module(p, mutants, lines, args.tests, limit, logdir, pytest_args, killed)
            results[module_name(p)] = {'total': total, 'mutants': [asdict(m) for m in mutants]}
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(results, indent=1))
    print(summary(results))


if __name__ == '__main__':
    main()
