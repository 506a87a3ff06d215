"""Time (and weigh) a full training step of a model against its baseline, side by side in one run.

    python tools/analysis_tools/benchmark_train_step.py [--case NAME ...] [--device cpu|cuda]
        [--batch-size 8] [--img-size 224] [--repeats 10] [--warmup 2] [--threads N] [--clock wall|cpu]
        [--amp bf16|fp16] [--compile] [--memory auto|spawn|forkserver|off] [--count-ops] [--tiny] [--list]

Each case (``--list`` shows them; default: all, less the timm cases where timm is not installed) compares a
model under test with a baseline, both built from a config of the repository with ``--cfg-options``-style
overrides: forward + loss + backward + AdamW step (``model.train_step``), both models alternating after
warm-up, median step time, images/s, achieved TFLOP/s (the step's matrix FLOPs, counted once with
``torch.utils.flop_counter``), their ratio against the case's target, and each model's peak memory measured
in a fresh process (``torch.cuda.max_memory_allocated`` on CUDA, in a spawned process; the peak resident set
size on CPU, in a process of a fork server); see :mod:`studies.train_step_benchmark`, next to this script.
``--count-ops`` also counts
each model's aten operators per step (forward + loss, backward; eager, one ``TorchDispatchMode``): what a
host-bound GPU step pays for, the same on any machine, with the ratio and the case's operator target.
``--amp`` trains as ``AmpOptimWrapper`` does (bf16, or fp16 with a dynamic loss scale; a CPU runs bf16
only), ``--compile`` compiles ``model.loss`` as ``compile=True`` in ``tools/train.py`` does. ``--tiny`` swaps
in toy versions of the models to check that a case runs (its ratios mean nothing and no target is judged).
The run ends with a Markdown table of all cases. The exit status is 1 when a judged case misses its target.
New cases are registered in that module.
"""

import argparse
import sys

import torch
from studies.train_step_benchmark import CASES, SUMMARY_HEADER, TIMM_MISSING, run_case, timm_available

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Training-step time and memory of a model vs. its baseline. '
        'Exit status 1 when a judged case misses its target (not with --tiny).'
    )
    parser.add_argument(
        '--case',
        nargs='+',
        choices=sorted(CASES),
        metavar='NAME',
        help=f'cases to run (default: all): {", ".join(sorted(CASES))}',
    )
    parser.add_argument('--list', action='store_true', help='list the cases and exit')
    parser.add_argument('--device', choices=['cpu', 'cuda'], default='cpu')
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--repeats', type=int, default=10, help='timed steps per model (after warm-up)')
    parser.add_argument('--warmup', type=int, default=2, help='untimed steps per model first')
    parser.add_argument('--threads', type=int, help='torch CPU threads (default: torch\'s choice)')
    parser.add_argument(
        '--clock',
        choices=['wall', 'cpu'],
        default='wall',
        help='wall time, or the process\'s CPU time (steadier on a busy machine; use it with '
        '--threads 1, as more threads add their waiting)',
    )
    parser.add_argument(
        '--amp',
        choices=['bf16', 'fp16'],
        help='mixed precision as AmpOptimWrapper trains: bf16 (on CUDA or the CPU) or fp16 with a '
        'dynamic loss scale (CUDA only); default fp32. A case that fixes a side\'s precision keeps it',
    )
    parser.add_argument(
        '--compile', action='store_true', help='compile both sides\' model.loss as compile=True in tools/train.py does'
    )
    parser.add_argument(
        '--memory',
        choices=['auto', 'spawn', 'forkserver', 'off'],
        default='auto',
        help='how the peak-memory processes start (auto: spawn on CUDA, the fork server on a CPU), '
        'or off (no memory pass)',
    )
    parser.add_argument(
        '--count-ops',
        action='store_true',
        help='count each model\'s aten operators per step (forward + loss, backward; eager) and '
        'judge the case\'s operator target',
    )
    parser.add_argument(
        '--tiny', action='store_true', help='toy-sized models: checks that the cases run; ratios are not judged'
    )
    args = parser.parse_args(argv)
    if min(args.batch_size, args.img_size, args.repeats) < 1 or args.warmup < 0:
        parser.error('--batch-size, --img-size and --repeats must be positive, --warmup non-negative')
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: no CUDA device is available')
    if args.device == 'cuda' and args.clock == 'cpu':
        parser.error('--clock cpu measures CPU work; time CUDA steps with --clock wall')
    if args.device == 'cpu' and args.amp == 'fp16':
        parser.error('--amp fp16 needs a GPU (float16 autocast with a loss scale); on a CPU use --amp bf16')
    if args.case and not timm_available() and any(CASES[name].needs_timm for name in args.case):
        parser.error(TIMM_MISSING)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        for name in sorted(CASES):
            case = CASES[name]
            ops = f'; op ratio ({case.op_target[0]}) <= {case.op_target[1]:.3f}' if case.op_target else ''
            print(
                f'{name}: {case.description} (config {case.recipe()}; target: time ratio <= '
                f'{case.max_time_ratio:.3f}{ops})'
            )
        return
    names = args.case
    if names is None:
        names = [n for n in sorted(CASES) if timm_available() or not CASES[n].needs_timm]
        if len(names) < len(CASES):
            print(f'skipping {", ".join(n for n in sorted(CASES) if n not in names)}: {TIMM_MISSING}')
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f'device {args.device}, {torch.get_num_threads()} threads, batch {args.batch_size}, '
        f'{args.img_size}x{args.img_size} images, {args.amp or "fp32"}{", compiled" if args.compile else ""}, '
        f'{args.repeats} timed steps per model after {args.warmup} warm-up steps (interleaved, median, '
        f'{args.clock} clock){"; TINY models" if args.tiny else ""}'
    )
    missed, rows = [], []
    for name in names:
        res = run_case(
            name,
            batch_size=args.batch_size,
            img_size=args.img_size,
            repeats=args.repeats,
            warmup=args.warmup,
            device=args.device,
            tiny=args.tiny,
            threads=args.threads,
            clock=args.clock,
            amp=args.amp,
            compile=args.compile,
            memory=args.memory != 'off',
            start_method=None if args.memory in ('auto', 'off') else args.memory,
            count_ops=args.count_ops,
        )
        print(f'\n== {name}: {res.case.description}')
        print(f'config {res.case.recipe()}')
        print(res.report(judge=not args.tiny), flush=True)
        rows.append(res.row(judge=not args.tiny))
        if not res.passed and not args.tiny:
            missed.append(name)
    print(f'\nsummary\n{SUMMARY_HEADER}')
    print('\n'.join(rows))
    if missed:
        print(f'\ntargets missed: {", ".join(missed)}')
        sys.exit(1)


if __name__ == '__main__':
    main()
