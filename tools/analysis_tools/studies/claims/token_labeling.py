"""Token labeling on the digits: do dense token targets from a teacher, and MixToken, beat plain CE?

Paper: Jiang et al., *All Tokens Matter: Token Labeling for Training Better Vision Transformers*,
https://arxiv.org/abs/2104.10858. Claims tested (Table 6 and §4.3 ablations): training every patch
token on the teacher's dense score map (token labeling, Eq. 6-7) improves top-1 over training the
class token alone, and MixToken (Eq. 8-10) improves it further.

The chain of ``configs/lvvit/README.md`` ("The chain on the bundled digits"), run by this section:

1. the teacher ``configs/lvvit/resnet18-cifar-w16_1xb64_digits-teacher.py`` (``TEACHER_EPOCHS``
   epochs, seed 0), its top-1 and how right its maps are: the agreement of the pooled map with the
   image label (``tools/generate_label_maps.py``'s check) and the share of map cells whose top class
   is the image's label (background cells included, so below 100% even for a perfect teacher);
2. its dense top-5 maps (``tools/generate_label_maps.py --img-size 32``, 4x4 cells) packed by
   ``tools/dataset_converters/pack_label_maps.py``;
3. five students, 3 seeds each, ``EPOCHS`` epochs, the tiny LV-ViT of
   ``configs/lvvit/lvvit-tiny_1xb64_tl_digits.py`` on 8x8-pixel tokens (a 4x4 grid, one token per
   teacher cell; the configs' 4-pixel tokens cost 3x more): plain CE
   (``lvvit-tiny_1xb64_digits.py``), token labeling without and with MixToken, each with the two
   readings of the maps (``TokenLabelTarget(reading=...)``): ``'topk'`` (the paper's description: a
   renormalised top-5 distribution per token) and ``'official'`` (the official code's softmax over
   all classes). Token-labeling students predict with the official rule (class token + 0.5 x the
   per-class max of the token predictions).
"""

from pathlib import Path

import numpy as np

from .core import ROOT, accuracy_table, figure, fmt_options, markdown_table, register_section, verdict

TEACHER = 'configs/lvvit/resnet18-cifar-w16_1xb64_digits-teacher.py'
STUDENT = 'configs/lvvit/lvvit-tiny_1xb64_tl_digits.py'
CE = 'configs/lvvit/lvvit-tiny_1xb64_digits.py'
NUM_CLASSES, IMG_SIZE, PATCH, EPOCHS, TEACHER_EPOCHS = 10, 32, 8, 6, 20
READINGS = {'topk': 'renormalised top-5', 'official': 'official'}


def teacher_maps(ctx):
    """Train the teacher, write and pack its maps (once per teacher run).

    Returns:
        tuple: ``(teacher run, packed store, folder of .pt maps, pooled-map agreement line)``.
    """
    run = ctx.train_and_test(TEACHER, 0, tag='teacher', epochs=TEACHER_EPOCHS)
    folder, store = Path(run.work_dir) / 'label_maps', Path(run.work_dir) / 'label_maps_packed'
    log = Path(run.work_dir) / 'label_maps.log'
    if not (store / 'packed.json').is_file():
        ctx.run_tool(
            [
                'generate_label_maps.py',
                ROOT / TEACHER,
                run.checkpoint,
                folder,
                '--img-size',
                IMG_SIZE,
                '--batch-size',
                64,
                '--num-workers',
                0,
                '--cfg-options',
                *fmt_options(run.cfg_options),
            ],
            log,
        )
        ctx.run_tool(
            ['dataset_converters/pack_label_maps.py', folder, store, '--num-classes', NUM_CLASSES],
            Path(run.work_dir) / 'pack.log',
        )
    agreement = [ln for ln in log.read_text().splitlines() if 'agreement' in ln][-1].rsplit(': ', 1)[-1]
    return run, store, folder, agreement


def students(ctx, store) -> dict:
    """``{label: (tag, config, cfg_options)}`` of the five students."""
    from mmvitreg.utils import load_config

    pipeline = load_config(str(ROOT / STUDENT)).train_dataloader.dataset.pipeline
    at = {step['type']: i for i, step in enumerate(pipeline)}
    loader, target = at['mmvitreg.LoadTokenLabelMap'], at['mmvitreg.TokenLabelTarget']
    tokens = {'model.backbone.patch_size': PATCH}
    models = {'CE (class token only)': ('ce', CE, tokens)}
    for reading, name in READINGS.items():
        maps = {
            **tokens,
            f'train_dataloader.dataset.pipeline.{loader}.label_root': store,
            f'train_dataloader.dataset.pipeline.{loader}.img_prefix': ctx.data_root / 'train',
            f'train_dataloader.dataset.pipeline.{target}.token_label_size': IMG_SIZE // PATCH,
            f'train_dataloader.dataset.pipeline.{target}.reading': reading,
            f'train_dataloader.dataset.pipeline.{target}.num_classes': NUM_CLASSES,
        }
        models[f'TL, {name}'] = (f'tl-{reading}', STUDENT, {**maps, 'model.train_cfg.mix': None})
        models[f'TL + MixToken, {name}'] = (
            f'tl-mix-{reading}',
            STUDENT,
            {**maps, 'model.train_cfg.mix.patch_size': PATCH},
        )
    return models


def map_figure(ctx, folder: Path, num: int = 8):
    """The first ``num`` training images with their map's top class per cell (red: not the image's
    label), and the share of cells whose top class is the image's label over every map."""
    import mmcv

    from mmvitreg.datasets.label_maps import label_map_path, load_label_map

    lines = [ln.split() for ln in (ctx.data_root / 'meta' / 'train.txt').read_text().splitlines()]
    lines = [
        ln
        for ln in lines
        if Path(
            label_map_path(str(folder), str(ctx.data_root / 'train' / ln[0]), str(ctx.data_root / 'train'))
        ).is_file()
    ]
    right = cells = 0
    fig, axes = figure(1, num, figsize=(1.6 * num, 2))
    for i, (name, label) in enumerate(lines):
        top = load_label_map(
            label_map_path(str(folder), str(ctx.data_root / 'train' / name), str(ctx.data_root / 'train'))
        )[1, 0].astype(int)  # (H, W) top class
        right, cells = right + int((top == int(label)).sum()), cells + top.size
        if i < num:
            ax = axes[i]
            ax.imshow(mmcv.imread(str(ctx.data_root / 'train' / name), channel_order='rgb'))
            h, w = top.shape
            for (y, x), c in np.ndenumerate(top):
                ax.text(
                    (x + 0.5) * IMG_SIZE / w - 0.5,
                    (y + 0.5) * IMG_SIZE / h - 0.5,
                    str(c),
                    ha='center',
                    va='center',
                    fontsize=8,
                    color='tab:green' if c == int(label) else 'tab:red',
                    bbox=dict(facecolor='white', alpha=0.7, lw=0, pad=0.6),
                )
            ax.set_title(f'label {label}', fontsize=8)
            ax.axis('off')
    fig.suptitle('teacher map: top class per cell (green = the image label)', fontsize=9)
    return ctx.save_figure(fig, 'teacher_maps'), 100.0 * right / cells


def accuracy_figure(ctx, runs: dict, teacher_top1: float) -> str:
    fig, ax = figure(figsize=(8, 3.2))
    labels = list(runs)
    values = [[r.metrics['accuracy/top1'] for r in runs[k]] for k in labels]
    ax.bar(
        range(len(labels)),
        [np.mean(v) for v in values],
        yerr=[np.std(v, ddof=1) if len(v) > 1 else 0 for v in values],
        capsize=4,
        color=['tab:gray'] + ['tab:blue', 'tab:cyan'] * len(READINGS),
    )
    for i, v in enumerate(values):
        ax.plot([i] * len(v), v, 'k.', ms=4)
    ax.axhline(teacher_top1, color='tab:green', ls=':', label=f'teacher {teacher_top1:.1f}')
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha='right', fontsize=8)
    ax.set_ylim(max(0, min(min(v) for v in values) - 10), 100)
    ax.set_ylabel('top-1 (%)')
    ax.legend(fontsize=8)
    ax.grid(axis='y', alpha=0.3)
    return ctx.save_figure(fig, 'top1')


@register_section(
    'token_labeling', 'Token labeling: token targets from a teacher, and MixToken', order=20, budget_min=12
)
def run(ctx) -> str:
    teacher, store, folder, agreement = teacher_maps(ctx)
    runs = {
        label: [ctx.train_and_test(config, seed, options, tag=tag, epochs=EPOCHS) for seed in ctx.seeds]
        for label, (tag, config, options) in students(ctx, store).items()
    }
    maps_plot, cell_share = map_figure(ctx, folder)
    top1 = {label: [r.metrics['accuracy/top1'] for r in model_runs] for label, model_runs in runs.items()}
    ce = top1['CE (class token only)']
    claims = []
    for name in READINGS.values():
        tl, mix = top1[f'TL, {name}'], top1[f'TL + MixToken, {name}']
        claims.append(
            f'- {name} reading: token labeling vs CE **{verdict(tl, ce)}**; + MixToken vs token '
            f'labeling alone **{verdict(mix, tl)}**; token labeling + MixToken vs CE **{verdict(mix, ce)}**.'
        )
    official, topk = READINGS['official'], READINGS['topk']
    tl_readings = verdict(top1[f'TL, {official}'], top1[f'TL, {topk}'])
    mix_readings = verdict(top1[f'TL + MixToken, {official}'], top1[f'TL + MixToken, {topk}'])
    claims.append(
        f'- official vs renormalised reading: token labeling **{tl_readings}**, with MixToken **{mix_readings}**.'
    )
    missed = [
        verdict(top1[f'TL, {name}'], ce) in ('tie', 'worse')
        or verdict(top1[f'TL + MixToken, {name}'], top1[f'TL, {name}']) in ('tie', 'worse')
        for name in READINGS.values()
    ]
    if any(missed):
        claims.append(
            '- Likely reasons where the claims do not show: a digit is one centred object on a '
            'plain background, so the class label already says what every token shows and the '
            'dense targets add little (the paper motivates them by ImageNet crops that show several '
            'objects or part of one); MixToken replaces on average half of each image\'s tokens '
            f'(λ ~ Beta(1, 1)), a regulariser that {ctx.pick(full=EPOCHS, ci=1)} epochs do not '
            'recover from (the paper trains 300).'
        )
    teacher_rows = [
        [
            f'ResNet-18-CIFAR/4, {ctx.pick(full=TEACHER_EPOCHS, ci=1)} epochs',
            f'{teacher.metrics["accuracy/top1"]:.2f}',
            agreement,
            f'{cell_share:.1f}%',
        ]
    ]
    nl = '\n'
    return f"""Teacher (`{TEACHER}`, seed 0) and its 4x4 top-5 maps of the training images:

{
        markdown_table(
            ['teacher', 'top-1 (val)', 'pooled map = image label', 'cells whose top class = image label'], teacher_rows
        )
    }

{maps_plot}

Students: tiny LV-ViT (`{STUDENT}`, 8x8-pixel tokens: a 4x4 grid, one token per teacher cell),
{ctx.pick(full=EPOCHS, ci=1)} epochs each; top-1 on the 297 validation images.

{accuracy_table(runs, baseline='CE (class token only)')}

{accuracy_figure(ctx, runs, teacher.metrics['accuracy/top1'])}

{nl.join(claims)}
"""
