"""Beyond the papers: DRLoc and DiversePatch's cosine loss regularising a segmentor's backbone on little data.

Neither paper trains its loss during segmentation (both fine-tune a backbone pre-trained with it; DRLoc official
issue #7, DiversePatch official issue #4), so there is no claim to check, only a question: does the loss, added to
mmseg's own losses while a segmentor trains on a small set, change mIoU, and does the cosine loss lower the last
stage's patch-wise cosine similarity as it does in classification?

Models: the digits UperNet Swin-nano (``configs/swin/upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py``, mmseg's
Swin-T recipe shrunk: AdamW 6e-5, warm-up then poly, batch 8, 128x128 crops) as an ``mmvitreg.TokenSegmentor``
without token losses (``plain``), with DRLoc
(``configs/drloc/upernet_swin-nano_drloc_1xb8-2k_digits-ade20k-128x128.py``: the dense configs' form, λ = 0.5,
official mean) and with the patch cosine loss
(``configs/diversepatch/upernet_swin-nano_patch-cos_1xb8-2k_digits-ade20k-128x128.py``, alpha_1 = 1); 3 seeds each.

Training is from scratch at the recipe's learning rate: DRLoc's setting (small data, no pre-training).
Measured before choosing (baseline, 50 canvases, tools/train.py + tools/test.py): in runs of 300-1,000 iterations
the segmentor predicts the background almost everywhere (mIoU 8.4-10.8 over the 11 classes), whether from scratch
or from the backbone trained as a digit classifier first (99% top-1), at learning rates 6e-5 to 6e-4, with a Dice
term or OHEM pixel sampling added; higher rates end on the all-background solution (mIoU 8.40). The digits are
thin strokes, about 0.6% of the pixels per class. So the mIoU of these runs compares segmentors that have only
begun to separate the digits: the table reports it with mAcc (the per-class pixel accuracy, which moves first).

Data: ``SHARE`` = 50 of the 200 training canvases (every 4th: a fixed split, the same for every run), about 175
digits, some 17 per class: a quarter of a set that is small to begin with, the regime DRLoc is about (few samples
per class), while every class still appears in training; the 50 validation canvases for mIoU (11 classes with the
background, mmseg's ``IoUMetric``). ``ITERS`` iterations of batch 8 (its 2,000-iteration schedule shortened,
its 100 warm-up iterations kept): 64 passes over the 50 canvases, about 2.5 minutes a run on one core.
"""

from statistics import mean

from ..patch_similarity import patch_cosine_per_layer
from .core import accuracy_table, figure, fmt_mean_std, markdown_table, mean_std, register_section, verdict

PLAIN = 'plain'
DRLOC = 'configs/drloc/upernet_swin-nano_drloc_1xb8-2k_digits-ade20k-128x128.py'
COS = 'configs/diversepatch/upernet_swin-nano_patch-cos_1xb8-2k_digits-ade20k-128x128.py'
# label -> (config, its --cfg-options, tag of the run folders); plain: a TokenSegmentor without users (mmseg's step)
MODELS = {
    PLAIN: (COS, {'model.aux_losses': []}, 'plain'),
    'DRLoc (λ = 0.5)': (DRLOC, {}, 'drloc'),
    'patch cosine (α1 = 1)': (COS, {}, 'patch-cos'),
}
NUM_CANVASES = 200  # digits.py ade20k's default training set
SHARE = list(range(0, NUM_CANVASES, 4))  # 50 canvases
ITERS = 400
WARMUP = 100  # the digits UperNet's
LAST = 'stage 4'
#: the mIoU of a segmentor that predicts the background everywhere on the 50 validation canvases (measured)
BACKGROUND_ONLY = 8.40


def seg_options(ctx, share, iters) -> dict:
    """``--cfg-options`` pointing the digits UperNet at the ADE20K-layout set of this report, training on ``share``
    for ``iters`` iterations (the digits UperNet's warm-up, then poly to ``iters``)."""
    root = str(ctx.work_dir / 'data' / 'digits_ade20k')
    warmup = min(WARMUP, iters // 2)
    opts = {
        'train_dataloader.dataset.ann_file': '',
        'train_dataloader.dataset.indices': share,
        'train_cfg.max_iters': iters,
        'param_scheduler.0.end': warmup,
        'param_scheduler.1.begin': warmup,
        'param_scheduler.1.end': iters,
    }
    for split in ('train', 'val', 'test'):
        opts[f'{split}_dataloader.dataset.data_root'] = root
    return opts


def similarity(ctx, runs, num_images):
    """``{model: [per-stage P(h) of each seed's run]}`` over the first validation canvases, and the stage names."""
    curves, names = {}, None
    for label, model_runs in runs.items():
        curves[label] = []
        for run in model_runs:
            model, cfg = ctx.load_model(run)
            batches = (inputs for inputs, _ in ctx.val_batches(model, cfg, num_images=num_images, batch_size=10))
            names, values = patch_cosine_per_layer(model.backbone, batches)
            curves[label].append(values)
    return curves, names


def plot(runs, curves, names):
    fig, (left, right) = figure(1, 2, figsize=(10, 3.6))
    for x, (label, model_runs) in enumerate(runs.items()):
        values = [r.metrics['mIoU'] for r in model_runs]
        left.scatter([x] * len(values), values, alpha=0.6)
        m, s = mean_std(values)
        left.errorbar([x + 0.15], [m], yerr=[s], fmt='o', color='k', capsize=4)
    left.axhline(BACKGROUND_ONLY, color='grey', ls='--', lw=1)
    left.text(-0.3, BACKGROUND_ONLY + 0.05, f'background everywhere: {BACKGROUND_ONLY:.2f}', fontsize=8, color='grey')
    left.set_xticks(range(len(runs)), list(runs))
    left.set_ylabel('mIoU (%), 50 validation canvases')
    left.set_title('seeds (dots), mean ± std (black)')
    for label, model_curves in curves.items():
        per_stage = list(zip(*model_curves))
        right.plot(range(1, len(names) + 1), [mean(v) for v in per_stage], marker='o', label=label)
        right.fill_between(
            range(1, len(names) + 1), [min(v) for v in per_stage], [max(v) for v in per_stage], alpha=0.2
        )
    right.set_xticks(range(1, len(names) + 1), names)
    right.set_ylabel('patch-wise absolute cosine similarity')
    right.set_title('Swin stage inputs (mean over seeds, band: min-max)')
    right.legend(fontsize=8)
    return fig


@register_section('dense', 'Beyond the papers: the token losses in segmentation training', order=60, budget_min=30)
def run(ctx) -> str:
    ctx.run_tool(
        ['dataset_converters/digits.py', 'ade20k', '--out', ctx.work_dir / 'data'],
        ctx.work_dir / 'data' / 'build_ade20k.log',
    )
    iters, share = ctx.pick(full=ITERS, ci=4), ctx.pick(full=SHARE, ci=SHARE[:4])
    runs = {
        label: [
            ctx.train_and_test(config, seed, {**seg_options(ctx, share, iters), **options}, tag=tag)
            for seed in ctx.seeds
        ]
        for label, (config, options, tag) in MODELS.items()
    }
    curves, names = similarity(ctx, runs, ctx.pick(full=None, ci=4))
    last = {label: [c[names.index(LAST)] for c in model_curves] for label, model_curves in curves.items()}
    rows = [
        [
            label,
            fmt_mean_std(values, 3),
            '—'
            if label == PLAIN
            else f'{mean(values) - mean(last[PLAIN]):+.3f} ({verdict(values, last[PLAIN], higher_is_better=False)})',
        ]
        for label, values in last.items()
    ]
    return '\n\n'.join(
        [
            'No paper trains these losses during segmentation (both fine-tune a backbone pre-trained with them: DRLoc '
            'official issue #7, DiversePatch official issue #4) and no number is published: this measures what the '
            'package makes possible, it does not check a claim. The digits UperNet Swin-nano '
            '(`configs/swin/upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py`, mmseg\'s Swin-T UperNet recipe '
            'shrunk: AdamW 6e-5, batch 8, 128x128 crops) as `mmvitreg.TokenSegmentor`, trained from scratch without '
            f'token losses, with DRLoc (`{DRLOC}`: λ = 0.5, the official form with the mean reduction, as the dense '
            f'configs) and with the patch cosine loss (`{COS}`: α1 = 1), on {len(share)} of the {NUM_CANVASES} '
            'training canvases (every 4th, the same for every run; 50 canvases hold about 17 digits per class: a '
            'small share of a small set, the few samples per class DRLoc is about, in which every class still '
            'appears). '
            f'{iters} iterations (the digits UperNet\'s 2,000 shortened, '
            f'its warm-up kept), seeds {", ".join(map(str, ctx.seeds))}. Study: '
            '`tools/analysis_tools/studies/claims/dense.py`.',
            '**Read the mIoU with care.** In runs this short the segmentor has only begun to separate the digits from '
            'the background (thin strokes, about 0.6% of the pixels per class): it predicts the background almost '
            'everywhere. Measured on the baseline before choosing the schedule: 300-1,000 iterations, from scratch or '
            'from the backbone trained as a 99%-top-1 digit classifier first, at learning rates 6e-5 to 6e-4, with a '
            'Dice term or OHEM pixel sampling, all gave mIoU 8.4-10.8 (8.40 is the background alone). Longer runs '
            'do not fit the report\'s minutes on a CPU, so these numbers say nothing about a trained segmentor.',
            'mIoU and mAcc (%) on the 50 validation canvases (11 classes with the background; single scale):',
            accuracy_table(runs, baseline=PLAIN, metric='mIoU'),
            accuracy_table(runs, baseline=PLAIN, metric='mAcc'),
            f'Patch-wise absolute cosine similarity of the last stage\'s tokens ({LAST}: the input of its norm, what '
            'both losses read) over the validation canvases (lower = more diverse):',
            markdown_table(['model', f'{LAST} P(h) (mean ± std)', f'vs {PLAIN}'], rows),
            'A difference smaller than the spread (the larger std) is a tie.',
            ctx.save_figure(plot(runs, curves, names), 'miou_and_cosine'),
        ]
    )
