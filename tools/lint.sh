#!/usr/bin/env bash
# The repository's formatter, linter, import sorting and spelling check: every hook of .pre-commit-config.yaml
# over every file git tracks. Exits non-zero on a violation, so CI fails on one (tools/run_tests.sh runs this
# first). The hooks fix what they can in place: review with `git diff` and commit.
#   bash tools/lint.sh
# pre-commit installs each hook's pinned tool from the package index into its cache (~/.cache/pre-commit) on the
# first run (~30 s); later runs take seconds. PRE_COMMIT names the pre-commit to run (default: the one on PATH).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "lint: $REPO is not a git checkout (pre-commit checks the files git tracks): not checked" >&2
  exit 0
fi
PRE_COMMIT=${PRE_COMMIT:-pre-commit}
if ! command -v "$PRE_COMMIT" >/dev/null 2>&1; then
  echo "lint: no $PRE_COMMIT: install requirements/lint.txt (tools/run_tests.sh's environment has it)" >&2
  exit 1
fi
if ! "$PRE_COMMIT" run --all-files --show-diff-on-failure --color never; then
  echo "lint: the tree breaks the hooks above; the fixable ones are fixed in place (git diff), the rest" \
       "name file:line. Fix, commit, run again; 'pre-commit install' checks each commit from then on." >&2
  exit 1
fi
