"""Time ``import mmvitreg.models`` against ``import mmpretrain.models``, each in a fresh interpreter.

    python tools/analysis_tools/import_time.py [--repeats 5] [--max-ratio 1.5]

The two imports alternate (``--repeats`` rounds of one each, so a busy machine slows both alike); each
is timed inside its interpreter around the import statement alone (the interpreter's start-up is not
counted). Prints every time, the medians and their ratio; exits 1 when the ratio exceeds ``--max-ratio``.
``import mmvitreg.models`` imports ``mmvitreg`` (its compat patches), mmpretrain's models and mmvitreg's,
not mmseg and not mmvitreg's segmentor and detectors (``mmvitreg.registry.HostedRegistry`` imports them when
one is built; the timed interpreter checks that). mmdet is imported by ``mmpretrain.models`` itself.
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = ('mmpretrain.models', 'mmvitreg.models')
TIMED = '''
import sys, time
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
dense = sorted(m for m in sys.modules if m.startswith(('mmseg', 'mmvitreg.models.segmentors',
                                                       'mmvitreg.models.detectors')))
assert not dense, f'import {module} imported {{dense}}'
print(elapsed)
'''


def time_import(module: str) -> float:
    """Seconds that ``import <module>`` takes in a fresh interpreter (this one's, this checkout first)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get('PYTHONPATH', '')]))
    proc = subprocess.run(
        [sys.executable, '-c', TIMED.format(module=module)], env=env, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        sys.exit(f'import {module} failed:\n{proc.stderr[-3000:]}')
    return float(proc.stdout.split()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=5, help='rounds, each timing both imports once')
    parser.add_argument('--max-ratio', type=float, default=1.5, help='fail above this mmvitreg / mmpretrain ratio')
    args = parser.parse_args(argv)
    times = {module: [] for module in MODULES}
    for _ in range(args.repeats):
        for module in MODULES:
            times[module].append(time_import(module))
    medians = {module: statistics.median(t) for module, t in times.items()}
    for module in MODULES:
        print(f'import {module}: median {medians[module]:.2f} s of {", ".join(f"{t:.2f}" for t in times[module])}')
    ratio = medians['mmvitreg.models'] / medians['mmpretrain.models']
    print(f'ratio mmvitreg.models / mmpretrain.models: {ratio:.2f} (at most {args.max_ratio})')
    if ratio > args.max_ratio:
        sys.exit(1)


if __name__ == '__main__':
    main()
