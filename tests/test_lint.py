"""The formatter, linter and spelling check (.pre-commit-config.yaml, run by tools/lint.sh before the suite):
its pins agree with requirements/lint.txt, and tools/lint.sh fails on a violation and passes a clean tree."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from packaging.requirements import Requirement

PRE_COMMIT = Path(sys.executable).with_name('pre-commit')
MISSPELT = 'recie' + 'ved'  # in two pieces, so that the check of this file passes


def pins(lines):
    return {r.name: str(r.specifier) for r in map(Requirement, lines)}


def test_pre_commit_hooks_pin_the_versions_of_requirements_lint():
    """Developers' hooks (pre-commit) and CI's environment (requirements/lint.txt) run the same tool versions: a
    newer ruff formats differently, so a tree clean for one would fail the other."""
    config = yaml.safe_load((REPO / '.pre-commit-config.yaml').read_text())
    hooks = [hook for repo in config['repos'] for hook in repo['hooks']]
    assert {repo['repo'] for repo in config['repos']} == {'local'}  # tools from the package index, not GitHub
    hook_pins = pins(dep for hook in hooks for dep in hook.get('additional_dependencies', ()) if ';' not in dep)
    lines = [ln.split('#')[0].strip() for ln in (REPO / 'requirements' / 'lint.txt').read_text().splitlines()]
    required = pins(ln for ln in lines if ln)
    assert {name: hook_pins[name] for name in ('ruff', 'codespell')} == {
        name: required[name] for name in ('ruff', 'codespell')
    }
    assert all(spec.startswith('==') for spec in {**hook_pins, **required}.values())
    assert {'ruff-format', 'ruff-check', 'codespell'} <= {hook['id'] for hook in hooks}


@pytest.fixture
def lint_tree(tmp_path):
    """A git checkout holding the repository's lint settings and tools/lint.sh, to which a test adds files."""
    tree = tmp_path / 'tree'
    (tree / 'tools').mkdir(parents=True)
    for name in ('.pre-commit-config.yaml', 'pyproject.toml', 'tools/lint.sh'):
        shutil.copy(REPO / name, tree / name)
    env = {
        **os.environ,
        'PRE_COMMIT': str(PRE_COMMIT),
        'GIT_AUTHOR_NAME': 't',
        'GIT_AUTHOR_EMAIL': 't@t',
        'GIT_COMMITTER_NAME': 't',
        'GIT_COMMITTER_EMAIL': 't@t',
    }
    subprocess.run(['git', 'init', '-q'], cwd=tree, check=True, env=env)

    def lint(files):
        for name, text in files.items():
            (tree / name).write_text(text)
        subprocess.run(['git', 'add', '-A'], cwd=tree, check=True, env=env)
        return subprocess.run(['bash', 'tools/lint.sh'], cwd=tree, env=env, capture_output=True, text=True, timeout=600)

    return lint


def test_lint_fails_on_each_kind_of_violation_and_passes_a_clean_tree(lint_tree):
    clean = 'import os\n\n\ndef f(x):\n    return os.path.join(x, "y")\n'
    assert lint_tree({'good.py': clean}).returncode == 0
    cases = {  # what, the file, the hook that fails, what it prints
        'unformatted': ('def f( x ):\n  return x\n', 'ruff-format', '+def f(x):'),
        'unused import': ('import os\n', 'ruff-check', '-import os'),
        'imports out of order': ('import sys\nimport os\n\nprint(os, sys)\n', 'ruff-check', '+import sys'),
        'misspelling': (f'# the {MISSPELT} value\n', 'codespell', f'{MISSPELT} ==> received'),
        'long line': (f'x = "{"a" * 130}"\n', 'ruff-check', 'E501'),
        'trailing whitespace': ('x = 1  \n', 'ruff-format', '+x = 1'),
    }
    for what, (text, hook, shown) in cases.items():
        proc = lint_tree({'good.py': clean, 'bad.py': text})
        assert proc.returncode != 0, (what, proc.stdout[-2000:])
        assert f'- hook id: {hook}' in proc.stdout and shown in proc.stdout, (what, proc.stdout[-2000:])
