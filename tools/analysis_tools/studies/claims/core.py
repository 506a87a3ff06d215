"""The digits study behind ``docs/claims.md``: does each paper's mechanism show on the bundled data?

    python tools/analysis_tools/claims_report.py --size {ci,full} [--sections NAME ...] [--out docs]
        [--work-dir work_dirs/claims] [--seeds S ...] [--assemble]

One *section* per technique (one module per section in this package, found automatically: adding a
section is adding a file). A section is a function ``run(ctx) -> str`` registered with
:func:`register_section`; it trains what it needs through :meth:`Context.train_and_test` (the real
``tools/train.py`` and ``tools/test.py``, run in this process, on the bundled digits), measures (in
process: :meth:`Context.load_model`, :meth:`Context.val_batches`; logged training scalars:
:meth:`Run.scalars`), saves its plots with :meth:`Context.save_figure` (make them with
:func:`figure`), tabulates with :func:`accuracy_table` and returns its markdown body. Example::

    @register_section('deepvit', 'DeepViT: re-attention against attention collapse', order=10, budget_min=10)
    def run(ctx):
        runs = {name: [ctx.train_and_test(CONFIG, seed, options, tag=name, epochs=20)
                       for seed in ctx.seeds] for name, options in MODELS.items()}
        fig, ax = figure()
        ...
        return accuracy_table(runs, baseline='vit') + '\n\n' + ctx.save_figure(fig, 'similarity')
 The writer stores that body as
the fragment ``<out>/claims/<section>.md`` (figures ``<out>/claims/<section>_*.png``) and assembles
``<out>/claims.md`` from all fragments in registry order (``order``), so running some sections
updates only theirs, and sections run on different branches merge without touching each other's
text (on a conflict in ``claims.md`` itself, ``claims_report.py --assemble`` rebuilds it from the
fragments).

Sizes (``ctx.size``):

* ``'ci'``: every model trains **one epoch** on a tiny subset (``CI_PER_CLASS`` images per class),
  one seed: checks that every section still runs end to end and writes numbers and plots. Its
  numbers mean nothing.
* ``'full'``: the report, 3 seeds (0, 1, 2), the whole report in at most 60 minutes on 2 cores.
  Each section keeps to its budget (measured time is written into its fragment):

  =====  ================  ======  ==============================================================
  order  section           budget  what it trains at full size (guide for the section's author)
  =====  ================  ======  ==============================================================
  10     deepvit           10 min  a deep plain ViT and the same with re-attention, 3 seeds each
  20     token_labeling    12 min  a teacher, its label maps, CE / TL / TL+MixToken x 2 readings
  30     diversepatch      10 min  a deep ViT with and without the DiversePatch losses, 3 seeds
  40     drloc             14 min  ViT / Swin / ResNet, with and without DRLoc, 2 few-shot sizes
  50     tl_align          10 min  CutMix vs CutMix + TL-Align, 3 seeds
  60     dense             30 min  a digits UperNet without / with DRLoc / with the cosine loss, 3 seeds
  =====  ================  ======  ==============================================================

  Measured cost (one core each, the machine shared by several full runs, load average 7-9 on 2
  cores): an epoch of the 1500 training images takes ~9 s with
  ``configs/deepvit/deepvit-tiny_1xb64_digits.py`` (4 blocks, 96 dims, 65 tokens), ~7 s with the
  12-block, 64-dim ViT on 17 tokens of the deepvit section, ~7 s with its tiny LV-ViT on 17 tokens
  and ~27 s with the ResNet-18-CIFAR/4 teacher (32x32 feature maps); every run adds a few seconds
  (building, testing). Cost grows with blocks x tokens x dims^2, so deep models for a 10-minute
  section are narrow and use few tokens. Measured sections (same load): deepvit 9.4 min,
  token_labeling 23.7 min (9.1 of them the 20-epoch teacher).

Cache: a finished run (train + test) leaves ``run.json`` in its folder under
``<work-dir>/<section>/``; asking for the same run again (same config, seed, options, subset,
epochs) returns it without training, so an interrupted report resumes where it stopped.

Accuracy comparisons follow the issue's rule: mean ± sample std over seeds, and a difference
smaller than the spread (the larger of the two stds) is called a tie (:func:`verdict`).
"""

import contextlib
import hashlib
import importlib
import io
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean, stdev
from typing import Callable, Dict, List, Optional, Sequence

#: the folder holding ``configs/`` and ``tools/``: the repository, or ``mmvitreg/.mim`` of an installed
#: wheel (this package lives in ``tools/analysis_tools/studies/claims/``). Config paths are relative to it.
ROOT = Path(__file__).resolve().parents[4]
SIZES = ('ci', 'full')
#: seeds of each size (``--seeds`` overrides)
SEEDS = {'ci': (0,), 'full': (0, 1, 2)}
#: training images per class of every run at size 'ci'
CI_PER_CLASS = 10
#: the digits set every run reads (``tools/dataset_converters/digits.py imagenet``, default split)
DIGITS = 'digits_imagenet'


@dataclass
class Section:
    """A registered section: ``run(ctx) -> markdown body``, its title, place and time budget."""

    name: str
    title: str
    order: int
    budget_min: float
    run: Callable


_SECTIONS: Dict[str, Section] = {}


def register_section(name: str, title: str, order: int, budget_min: float):
    """Decorator registering ``run(ctx) -> str`` as the section ``name`` of ``docs/claims.md``.

    Args:
        name (str): file-name stem of the fragment and figures (``docs/claims/<name>.md``).
        title (str): the section's heading in ``docs/claims.md``.
        order (int): place in ``docs/claims.md`` (ascending; see the table in this module's docstring).
        budget_min (float): minutes the section may take at size 'full' (written beside the measured time).
    """

    def wrap(run):
        if name in _SECTIONS and _SECTIONS[name].run is not run:
            raise KeyError(f'claims section {name!r} is registered twice')
        _SECTIONS[name] = Section(name, title, order, budget_min, run)
        return run

    return wrap


def sections() -> List[Section]:
    """Every registered section, in report order."""
    return sorted(_SECTIONS.values(), key=lambda s: (s.order, s.name))


def fmt_options(options: dict) -> List[str]:
    """``{'a.b': 1}`` -> ``['a.b=1']`` (lists and tuples written without spaces, as DictAction reads them)."""

    def value(v):
        if isinstance(v, (list, tuple)):
            inner = ','.join(value(x) for x in v)
            return f'[{inner}]' if isinstance(v, list) else f'({inner})'
        return str(v)

    return [f'{k}={value(v)}' for k, v in options.items()]


@dataclass
class Run:
    """One finished train + test run.

    Attributes:
        tag (str): the section's name for the model (e.g. ``'vit-12b'``).
        config (str): the config, relative to the repository root.
        seed (int): ``randomness.seed`` of the training run.
        cfg_options (dict): every ``--cfg-options`` both tools were given (data, seed, schedule, the
            section's own).
        metrics (dict): the final metrics of ``tools/test.py`` (``{'accuracy/top1': 97.6, ...}``).
        checkpoint (str): the last checkpoint of the training run.
        work_dir (str): the run's folder (logs, ``train.log``, ``test.log``, ``run.json``).
        commands (list): the train and test command lines, as run.
        seconds (float): wall time of training plus testing.
    """

    tag: str
    config: str
    seed: int
    cfg_options: dict
    metrics: dict
    checkpoint: str
    work_dir: str
    commands: list
    seconds: float

    def scalars(self) -> List[dict]:
        """Every line of the training run's ``vis_data/scalars.json`` (logged losses, lr, ... per step)."""
        files = sorted(Path(self.work_dir).glob('*/vis_data/scalars.json'))
        if not files:
            raise FileNotFoundError(f'no */vis_data/scalars.json under {self.work_dir}')
        return [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()]


@dataclass
class Context:
    """What a section gets: the size, the seeds, the data and the folders.

    Attributes:
        section (str): the section's name.
        size (str): ``'ci'`` or ``'full'``.
        seeds (tuple): the seeds accuracy comparisons run over.
        out_dir (Path): where ``claims.md`` is written (figures go to ``out_dir / 'claims'``).
        work_dir (Path): the report's work dir; this section's runs go to ``work_dir / section``.
        log (callable): prints a progress line.
    """

    section: str
    size: str
    seeds: tuple
    out_dir: Path
    work_dir: Path
    log: Callable = field(default=print, repr=False)
    #: training and testing time of the runs this section took from the cache
    cached_seconds: float = 0.0

    def __post_init__(self):
        self.out_dir, self.work_dir = Path(self.out_dir), Path(self.work_dir).resolve()

    @property
    def data_root(self) -> Path:
        """The digits set in the ImageNet layout (built once per report by :meth:`build_data`)."""
        return self.work_dir / 'data' / DIGITS

    def pick(self, full, ci):
        """``full`` at size 'full', else ``ci`` (e.g. ``ctx.pick(full=30, ci=1)`` epochs)."""
        return full if self.size == 'full' else ci

    def build_data(self) -> None:
        """Build the digits set under ``work_dir/data`` (skipped when already complete)."""
        self.run_tool(
            ['dataset_converters/digits.py', 'imagenet', '--out', self.work_dir / 'data'],
            self.work_dir / 'data' / 'build.log',
        )

    def subset(self, per_class: int) -> str:
        """The ``ann_file`` (relative to :attr:`data_root`) of the first ``per_class`` training images
        of every class, written once; the same images for every seed and model."""
        ann = f'meta/train_{per_class}pc.txt'
        if not (self.data_root / ann).is_file():
            taken: Dict[str, int] = {}
            lines = []
            for line in (self.data_root / 'meta' / 'train.txt').read_text().splitlines():
                label = line.split()[1]
                if taken.get(label, 0) < per_class:
                    taken[label] = taken.get(label, 0) + 1
                    lines.append(line)
            short = {k: n for k, n in taken.items() if n < per_class}
            if short:
                raise ValueError(
                    f'{per_class} images per class asked, but classes {sorted(short)} have '
                    f'only {sorted(short.values())} training images'
                )
            tmp = self.data_root / (ann + '.tmp')
            tmp.write_text('\n'.join(lines) + '\n')
            tmp.replace(self.data_root / ann)
        return ann

    def data_options(self, per_class: Optional[int] = None) -> dict:
        """``--cfg-options`` pointing a digits config's loaders at :attr:`data_root` (in-process loading,
        no workers); ``per_class`` trains on :meth:`subset` (at size 'ci' at most ``CI_PER_CLASS``)."""
        opts = {}
        for split in ('train', 'val', 'test'):
            opts.update(
                {
                    f'{split}_dataloader.dataset.data_root': str(self.data_root),
                    f'{split}_dataloader.num_workers': 0,
                    f'{split}_dataloader.persistent_workers': False,
                }
            )
        if self.size == 'ci':
            per_class = min(per_class or CI_PER_CLASS, CI_PER_CLASS)
        if per_class is not None:
            opts['train_dataloader.dataset.ann_file'] = self.subset(per_class)
        return opts

    def run_tool(self, args: Sequence, log_file: Path) -> None:
        """Run ``main(argv)`` of ``tools/<args[0]>`` in this process (no start-up cost per run) from
        :data:`ROOT` (paths in ``args`` may be relative to it), its output to ``log_file``; training
        progress lines (``Epoch(train)``) are echoed. Raises
        ``RuntimeError`` with the log's tail when the tool exits with an error."""
        log_file = Path(log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        # mmengine keys a run's logger, message hub and visualizer by the second it starts in:
        # every run starts in a second of its own
        while int(time.time()) == _last_start[0]:
            time.sleep(0.05)
        _last_start[0] = int(time.time())
        code = None
        with open(log_file, 'w') as log:
            log.write(_shell(['tools/' + str(args[0]), *args[1:]]) + '\n')
            out = _Progress(log, self.log)
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), contextlib.chdir(ROOT):
                    _tool(str(args[0])).main([str(a) for a in args[1:]])
            except SystemExit as e:
                code = e.code
                log.write(f'exit: {code}\n')
        if code not in (None, 0):
            tail = ''.join(log_file.read_text().splitlines(keepends=True)[-40:])
            raise RuntimeError(f'tools/{args[0]} failed (log: {log_file})\n{tail}')

    def train_and_test(
        self,
        config: str,
        seed: int,
        cfg_options: Optional[dict] = None,
        *,
        tag: str = None,
        per_class: Optional[int] = None,
        epochs: Optional[int] = None,
    ) -> Run:
        """Train ``config`` with ``tools/train.py`` and test its last checkpoint with ``tools/test.py``.

        Args:
            config (str): config path, relative to :data:`ROOT` (e.g.
                ``'configs/deepvit/deepvit-tiny_1xb64_digits.py'``).
            seed (int): ``randomness.seed``.
            cfg_options (dict): further ``--cfg-options`` for both tools (``{'model.backbone.arch.num_layers': 12}``).
            tag (str): short model name for the folder, the progress lines and :attr:`Run.tag`
                (default: the config's stem).
            per_class (int): train on the first ``per_class`` images of every class (few-shot).
            epochs (int): train this many epochs instead of the config's (one at size 'ci' whatever
                is given; an iteration-based config keeps its iterations: set ``train_cfg.max_iters``
                in ``cfg_options``); the by-epoch schedulers' ``begin`` / ``end`` are scaled by the same factor
                (rounded, each at least one epoch long), e.g. 2 warm-up + 28 cosine epochs of 30 become
                1 + 14 of 15. The last checkpoint is always saved.

        Returns:
            Run: metrics, checkpoint, folder; cached: an identical finished run is not run again.
        """
        tag = tag or Path(config).stem
        options = {**self.data_options(per_class), 'randomness.seed': seed, **(cfg_options or {})}
        epochs = 1 if self.size == 'ci' else epochs
        if epochs is not None:
            options.update(self._schedule_options(config, epochs, options))
        key = json.dumps([config, seed, fmt_options(options)], sort_keys=True)
        run_dir = self.work_dir / self.section / f'{tag}-seed{seed}-{hashlib.sha1(key.encode()).hexdigest()[:8]}'
        record = run_dir / 'run.json'
        if record.is_file():
            run = Run(**json.loads(record.read_text()))
            self.log(f'  {tag} seed {seed}: cached ({_metric_line(run.metrics)})')
            self.cached_seconds += run.seconds
            return run
        self.log(f'  {tag} seed {seed}: training {config} ({run_dir})')
        start = time.time()
        opts = ['--cfg-options', *fmt_options(options)]
        train = ['train.py', ROOT / config, '--work-dir', run_dir, '--no-validate', *opts]
        self.run_tool(train, run_dir / 'train.log')
        checkpoint = (run_dir / 'last_checkpoint').read_text().strip()
        test = ['test.py', ROOT / config, checkpoint, '--work-dir', run_dir / 'test', *opts]
        self.run_tool(test, run_dir / 'test.log')
        lines = [ln for ln in (run_dir / 'test.log').read_text().splitlines() if ln.startswith('metrics: ')]
        if not lines:
            raise RuntimeError(f'tools/test.py printed no "metrics:" line (log: {run_dir / "test.log"})')
        run = Run(
            tag,
            config,
            seed,
            options,
            json.loads(lines[-1][len('metrics: ') :]),
            checkpoint,
            str(run_dir),
            [_shell(['tools/' + str(c[0]), *c[1:]]) for c in (train, test)],
            time.time() - start,
        )
        record.write_text(json.dumps(asdict(run), indent=1, default=str))  # paths as text
        self.log(f'  {tag} seed {seed}: {_metric_line(run.metrics)} ({run.seconds:.0f} s)')
        return run

    @staticmethod
    def _schedule_options(config: str, epochs: int, options: dict) -> dict:
        from mmvitreg.utils import load_config

        cfg = load_config(str(ROOT / config), options)
        if 'max_epochs' not in cfg.train_cfg:  # iteration-based (mmseg): the section sets max_iters itself
            return {}
        last = cfg.train_cfg.max_epochs
        opts = {'train_cfg.max_epochs': epochs}
        for i, sched in enumerate(cfg.get('param_scheduler') or []):
            if sched.get('by_epoch', True):
                begin = min(round(sched.get('begin', 0) * epochs / last), epochs - 1)
                end = max(round(min(sched.get('end', last), last) * epochs / last), begin + 1)
                opts.update({f'param_scheduler.{i}.begin': begin, f'param_scheduler.{i}.end': end})
        return opts

    def load_model(self, run: Run, checkpoint: Optional[str] = None):
        """``(model, cfg)``: the model of ``run``'s config and options with ``checkpoint`` (default: the
        run's last one), in eval mode on the CPU, and the config (its default scope is made the current one)."""
        from mmengine.registry import MODELS, init_default_scope

        from mmvitreg.engine.checkpoint import load_weights
        from mmvitreg.utils import load_config

        cfg = load_config(str(ROOT / run.config), run.cfg_options)
        init_default_scope(cfg.default_scope)
        model = MODELS.build(
            {**cfg.model, 'data_preprocessor': cfg.model.get('data_preprocessor') or cfg.get('data_preprocessor')}
        )
        load_weights(model, checkpoint or run.checkpoint, 'strict', logger='silent')
        return model.eval(), cfg

    @staticmethod
    def val_batches(model, cfg, num_images: Optional[int] = None, batch_size: int = 64):
        """Yield ``(inputs, data_samples)`` of the first ``num_images`` (default: all) images of
        ``cfg``'s validation set, in order, through ``model``'s data preprocessor: ``inputs`` is
        ``(B, 3, H, W)``, normalised as in testing."""
        from mmengine.runner import Runner

        loader = Runner.build_dataloader(
            {
                **cfg.val_dataloader,
                'batch_size': batch_size,
                'num_workers': 0,
                'persistent_workers': False,
                'sampler': dict(type='DefaultSampler', shuffle=False),
            }
        )
        seen = 0
        for batch in loader:
            data = model.data_preprocessor(batch, False)
            take = batch_size if num_images is None else min(batch_size, num_images - seen)
            yield data['inputs'][:take], data['data_samples'][:take]
            seen += take
            if num_images is not None and seen >= num_images:
                return

    def save_figure(self, fig, name: str) -> str:
        """Save a matplotlib figure as ``<out>/claims/<section>_<name>.png``, close it, and return the
        markdown that shows it in ``claims.md``."""
        import matplotlib.pyplot as plt

        file = f'{self.section}_{name}.png'
        (self.out_dir / 'claims').mkdir(parents=True, exist_ok=True)
        fig.savefig(self.out_dir / 'claims' / file, dpi=110, bbox_inches='tight')
        plt.close(fig)
        return f'![{self.section} {name}](claims/{file})'


_last_start = [0]


def _tool(name: str):
    """The module of the tool ``tools/<name>`` (``'train.py'``, ``'dataset_converters/digits.py'``), imported
    as ``tools.<dotted name>`` (``tools/`` is a namespace package of :data:`ROOT`, put on ``sys.path``)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    module = importlib.import_module('tools.' + name.removesuffix('.py').replace('/', '.'))
    if Path(module.__file__).resolve() != (ROOT / 'tools' / name).resolve():
        raise ImportError(
            f'tools/{name} imported as {module.__name__} from {module.__file__}, not from {ROOT}: '
            'another package named "tools" comes first on sys.path; run the report without it '
            f'(e.g. from {ROOT})'
        )
    return module


class _Progress(io.TextIOBase):
    """A text stream writing to a log file and echoing its training progress lines with ``echo``
    (to the ``sys.stdout`` of the moment it was made). mmengine's loggers keep it as their console
    stream after the run: once the log is closed, it writes there."""

    def __init__(self, log, echo):
        self.file, self.echo, self.stdout = log, echo, sys.stdout

    def write(self, text):
        if self.file.closed:
            return self.stdout.write(text)
        self.file.write(text)
        for line in text.splitlines():
            if 'Epoch(train)' in line:
                with contextlib.redirect_stdout(self.stdout):
                    self.echo(f'    {line.split(" - ", 2)[-1].strip()[:150]}')
        return len(text)


def figure(*args, **kwargs):
    """``matplotlib.pyplot.subplots`` with the non-interactive backend (no display here)."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def _shell(args) -> str:
    """The command line of a tool run, paths inside the repository relative to it."""
    args = [str(a).replace(f'{ROOT}/', '') for a in args]
    return 'python ' + ' '.join(f"'{a}'" if any(c in a for c in ' ()[],') else a for a in args)


def _metric_line(metrics: dict) -> str:
    return ', '.join(f'{k} {v:.2f}' for k, v in metrics.items() if isinstance(v, float))


# ---------------------------------------------------------------------------------------------- tables


def mean_std(values: Sequence[float]):
    """``(mean, sample std)``; the std of one value is 0."""
    values = list(values)
    return mean(values), (stdev(values) if len(values) > 1 else 0.0)


def fmt_mean_std(values: Sequence[float], digits: int = 2) -> str:
    m, s = mean_std(values)
    return f'{m:.{digits}f} ± {s:.{digits}f}'


def verdict(values: Sequence[float], baseline: Sequence[float], higher_is_better: bool = True) -> str:
    """The issue's rule: ``'better'`` / ``'worse'`` than the baseline when the means differ by at
    least the spread (the larger of the two sample stds), else ``'tie'``; with fewer than 2 seeds on
    either side there is no spread: ``'n/a (1 seed)'``."""
    if min(len(values), len(baseline)) < 2:
        return 'n/a (1 seed)'
    (m, s), (mb, sb) = mean_std(values), mean_std(baseline)
    if abs(m - mb) < max(s, sb) or m == mb:
        return 'tie'
    return 'better' if (m > mb) == higher_is_better else 'worse'


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ['| ' + ' | '.join(map(str, header)) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(map(str, r)) + ' |' for r in rows]
    return '\n'.join(lines)


def accuracy_table(runs: Dict[str, List[Run]], baseline: str, metric: str = 'accuracy/top1') -> str:
    """A markdown table: one row per model (``{label: its runs over seeds}``), its ``metric`` as
    mean ± std with the seeds, and its difference to ``baseline`` with :func:`verdict`."""
    base = [r.metrics[metric] for r in runs[baseline]]
    rows = []
    for label, model_runs in runs.items():
        values = [r.metrics[metric] for r in model_runs]
        diff = '—' if label == baseline else f'{mean(values) - mean(base):+.2f} ({verdict(values, base)})'
        rows.append([label, fmt_mean_std(values), ' '.join(str(r.seed) for r in model_runs), diff])
    return markdown_table(['model', f'{metric} (mean ± std)', 'seeds', f'vs {baseline}'], rows)


# ---------------------------------------------------------------------------------------------- writer

HEADER = """# What each paper claims, measured on the bundled digits

Generated by `tools/analysis_tools/claims_report.py` (sections in `tools/analysis_tools/studies/claims/`): each
technique's mechanism-level claim and its top-1 on the bundled digits (scikit-learn's scans, 1500
training / 297 validation images at 32x32, built by `tools/dataset_converters/digits.py`), with tiny
models trained by the repository's own `tools/train.py` and tested by `tools/test.py`. Accuracy is
the mean ± sample std over seeds; a difference smaller than the spread (the larger std) is a tie. A
claim that does not show on this data is reported as such. Each section says the size it was run at
and the command that re-runs it; `--assemble` rebuilds this file from `docs/claims/<section>.md`.
"""


def command(names: Sequence[str], size: str) -> str:
    return f'python tools/analysis_tools/claims_report.py --size {size} --sections {" ".join(names)}'


def fragment(section: Section, ctx: Context, body: str, minutes: float) -> str:
    """A section's stored text: how it was run (``minutes``: this invocation; the time of the runs it
    took from the cache is added, so the figure is what a run from scratch takes; the machine's
    15-minute load average says how shared it was), then its body."""
    cached = ctx.cached_seconds / 60
    took = (
        f'{minutes + cached:.1f} min ('
        + (f'{cached:.1f} of them in cached runs; ' if cached else '')
        + f'budget {section.budget_min:g} min at size full; machine load {os.getloadavg()[2]:.1f} on '
        f'{os.cpu_count()} cores at the end)'
    )
    return (
        f'<!-- fragment of claims.md, written by tools/analysis_tools/claims_report.py -->\n'
        f'*Size `{ctx.size}`, seeds {", ".join(map(str, ctx.seeds))}; took {took}. '
        f'Re-run:* `{command([section.name], ctx.size)}`\n\n'
        f'{body.strip()}\n'
    )


def assemble(out_dir: Path) -> str:
    """``claims.md`` from the header and every registered section's fragment (a placeholder for a
    section never run); returns the text and writes it to ``out_dir / 'claims.md'``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = [HEADER]
    for section in sections():
        frag = out_dir / 'claims' / f'{section.name}.md'
        text = (
            frag.read_text().split('\n', 1)[1]
            if frag.is_file()
            else f'*Not run yet:* `{command([section.name], "full")}`\n'
        )
        parts.append(f'## {section.title}\n\n{text}')
    text = '\n'.join(parts)
    (out_dir / 'claims.md').write_text(text)
    return text


def run_sections(
    names: Sequence[str], size: str, out_dir, work_dir, seeds: Optional[Sequence[int]] = None, log: Callable = print
) -> Dict[str, float]:
    """Run the named sections (all when empty) at ``size``, write their fragments and figures, and
    re-assemble ``claims.md``. Returns the minutes each section took."""
    if size not in SIZES:
        raise ValueError(f'size must be one of {SIZES}, got {size!r}')
    known = {s.name: s for s in sections()}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f'unknown claims sections {unknown}; registered: {list(known)}')
    seeds = tuple(seeds) if seeds else SEEDS[size]
    minutes = {}
    Context('data', size, seeds, out_dir, work_dir, log).build_data()
    for section in [s for s in sections() if not names or s.name in names]:
        ctx = Context(section.name, size, seeds, out_dir, work_dir, log)
        log(f'[claims] {section.name} (size {size}, seeds {list(seeds)}, budget {section.budget_min:g} min)')
        start = time.time()
        for old in (ctx.out_dir / 'claims').glob(f'{section.name}_*.png'):
            old.unlink()
        body = section.run(ctx)
        minutes[section.name] = (time.time() - start) / 60
        (ctx.out_dir / 'claims').mkdir(parents=True, exist_ok=True)
        (ctx.out_dir / 'claims' / f'{section.name}.md').write_text(fragment(section, ctx, body, minutes[section.name]))
        log(
            f'[claims] {section.name}: done in {minutes[section.name]:.1f} min, {ctx.cached_seconds / 60:.1f} '
            f'min more in cached runs '
            f'({ctx.out_dir / "claims" / (section.name + ".md")})'
        )
    assemble(out_dir)
    return minutes
