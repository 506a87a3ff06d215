"""DiversePatch on the digits: do the patch diversity losses lower the last layer's patch-wise cosine
similarity of a deep, narrow DeiT (paper §3 and Figure 3), and what do they do to top-1?

Both models are ``configs/diversepatch/deit-deep-narrow_1xb64_diversepatch_digits.py`` (12 blocks of 64
channels, a 4x4 token grid, patch-aligned CutMix): with the three losses (alpha = 1) and with none
(``model.aux_losses=[]``), same seeds. The similarity ``P(h)`` of every block's output is averaged over the
validation images (:func:`studies.patch_similarity.patch_cosine_per_layer`).
"""

from statistics import mean

from ..patch_similarity import patch_cosine_per_layer
from .core import accuracy_table, figure, fmt_mean_std, markdown_table, register_section, verdict

CONFIG = 'configs/diversepatch/deit-deep-narrow_1xb64_diversepatch_digits.py'
MODELS = {'plain': {'model.aux_losses': []}, 'diversepatch': {}}
EPOCHS = 12  # the config's 30-epoch schedule shrunk to fit the section's budget (6 runs on a shared 2-core machine)


def similarity_curves(ctx, runs):
    """``{model: [per-block P(h) of each seed's run]}`` over the validation images, and the block names."""
    curves, names = {}, None
    for label, model_runs in runs.items():
        curves[label] = []
        for run in model_runs:
            model, cfg = ctx.load_model(run)
            batches = (inputs for inputs, _ in ctx.val_batches(model, cfg, num_images=ctx.pick(None, 64)))
            names, values = patch_cosine_per_layer(model.backbone, batches)
            curves[label].append(values)
    return curves, names


@register_section('diversepatch', 'DiversePatch: patch diversity against over-smoothing', order=30, budget_min=10)
def run(ctx):
    runs = {
        label: [ctx.train_and_test(CONFIG, seed, options, tag=label, epochs=EPOCHS) for seed in ctx.seeds]
        for label, options in MODELS.items()
    }
    curves, names = similarity_curves(ctx, runs)
    last = {label: [c[-1] for c in model_curves] for label, model_curves in curves.items()}
    rows = [
        [
            label,
            fmt_mean_std(values, 3),
            '—'
            if label == 'plain'
            else f'{mean(values) - mean(last["plain"]):+.3f} '
            f'({verdict(values, last["plain"], higher_is_better=False)})',
        ]
        for label, values in last.items()
    ]
    fig, ax = figure(figsize=(6, 3.5))
    for label, model_curves in curves.items():
        per_block = list(zip(*model_curves))
        ax.plot(range(1, len(names) + 1), [mean(v) for v in per_block], marker='o', label=label)
        ax.fill_between(range(1, len(names) + 1), [min(v) for v in per_block], [max(v) for v in per_block], alpha=0.2)
    ax.set_xlabel('block')
    ax.set_ylabel('patch-wise absolute cosine similarity')
    ax.legend()
    return '\n\n'.join(
        [
            'Claim (paper §3-4, Figure 3): the patch-wise absolute cosine similarity of a deep ViT grows with depth, '
            'and the cosine, contrastive and mixing losses keep the last layer\'s patches diverse while improving '
            f'top-1. A deep, narrow DeiT (`{CONFIG}`, 12 blocks x 64 channels, {EPOCHS} epochs) trained with '
            'patch-aligned CutMix, with the three losses (alpha = 1) and without (`model.aux_losses=[]`).',
            'Last block\'s patch-wise absolute cosine similarity over the validation images (lower = more diverse):',
            markdown_table(['model', 'last-layer P(h) (mean ± std)', 'vs plain'], rows),
            'Top-1 on the validation images:',
            accuracy_table(runs, baseline='plain'),
            'Patch-wise absolute cosine similarity per block (mean over seeds, band: min-max):',
            ctx.save_figure(fig, 'cosine_per_block'),
        ]
    )
