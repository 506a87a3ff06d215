"""Train the small digits models of each technique's claims and write ``docs/claims.md``.

    python tools/analysis_tools/claims_report.py --size {ci,full} [--sections NAME ...] [--out docs]
        [--work-dir work_dirs/claims] [--seeds S ...]
    python tools/analysis_tools/claims_report.py --assemble [--out docs]

``--size full`` is the report (3 seeds, at most 60 minutes on 2 cores); ``--size ci`` trains every
model one epoch on a tiny subset (CI). Each section's text goes to ``<out>/claims/<section>.md`` and
its plots to ``<out>/claims/<section>_*.png``; ``<out>/claims.md`` is assembled from all fragments.
Finished runs are cached under ``--work-dir``: a re-run resumes. ``--assemble`` only rebuilds
``claims.md`` from the fragments (after merging branches that ran different sections). The sections
and their time budgets: :mod:`studies.claims.core` (next to this script).
"""

import argparse
import sys

from studies.claims import assemble, run_sections, sections


def parse_args(argv=None):
    names = [s.name for s in sections()]
    parser = argparse.ArgumentParser(
        description='Measure each paper\'s claims on the bundled digits and write docs/claims.md'
    )
    parser.add_argument(
        '--size', choices=['ci', 'full'], help='ci: one epoch per model, tiny subsets; full: the report'
    )
    parser.add_argument(
        '--sections',
        nargs='+',
        default=[],
        choices=names,
        metavar='NAME',
        help=f'sections to run (default: all): {", ".join(names)}',
    )
    parser.add_argument('--out', default='docs', help='folder of claims.md and claims/ (default: docs)')
    parser.add_argument(
        '--work-dir', default='work_dirs/claims', help='data, runs and the run cache (default: work_dirs/claims)'
    )
    parser.add_argument('--seeds', type=int, nargs='+', help='seeds (default: 0 at ci, 0 1 2 at full)')
    parser.add_argument('--assemble', action='store_true', help='only rebuild claims.md from the fragments')
    args = parser.parse_args(argv)
    if not args.assemble and args.size is None:
        parser.error('--size is required (or --assemble)')
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.assemble:
        assemble(args.out)
        return
    minutes = run_sections(
        args.sections, args.size, args.out, args.work_dir, args.seeds, log=lambda line: print(line, flush=True)
    )
    print('\n'.join(f'{name}: {m:.1f} min' for name, m in minutes.items()))


if __name__ == '__main__':
    sys.exit(main())
