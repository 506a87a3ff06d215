"""tools/gpu_check.sh's summary counts every step it could not run: a dry run whose Python has no pytest ends with
the test step as an error, and the summary's count and the exit status agree (issue 37)."""

import os
import subprocess
import sys

from conftest import REPO, TOOLS


def test_a_step_that_could_not_run_is_an_error_in_the_summary_and_the_exit_status(tmp_path):
    site = tmp_path / 'site'
    site.mkdir()
    # an interpreter without pytest: the import fails as where it is not installed
    (site / 'pytest.py').write_text("raise ModuleNotFoundError(\"No module named 'pytest'\", name='pytest')\n")
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]))
    log = tmp_path / 'check.log'
    proc = subprocess.run(
        ['bash', str(TOOLS / 'gpu_check.sh'), '--dry-run', '--only', 'tests', '--log', str(log)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = proc.stdout[proc.stdout.index('===== mmvitreg GPU check: summary =====') :]
    assert 'tests/cuda: ERROR: not run: pytest is not importable' in summary, summary
    assert 'errors: 1 (steps that could not run, crashed or timed out); exit status 1' in summary, summary
    assert proc.returncode == 1
