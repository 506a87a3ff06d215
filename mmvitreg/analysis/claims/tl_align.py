"""Claims section ``tl_align``: does TL-Align's aligned target beat the area target of CutMix on the digits,
for a DeiT and a Swin, and how far do the two targets lie apart (paper Fig. 3)?

Per backbone (the tiny DeiT and Swin digits configs of ``configs/tlalign``), the same config trains with
the aligned target (TL-Align) and with the area target (``model.target_transform=None``: the same
token-aligned CutMix, the same images), over the report's seeds; top-1 compared with the tie rule.
Then, over the validation images mixed by each model's own CutMix (one fixed draw, seed 0), the RMSE
between the area share ``lam`` and the aligned share ``w`` (:mod:`mmvitreg.analysis.tl_align_diagnostics`)
of the untrained model and of every trained one, and the label maps of one trained TL-Align DeiT
(Fig. 5).
"""
import numpy as np
import torch

from ..loading import build_dataloader, build_model
from ..tl_align_diagnostics import align_batch, alignment_rmse, draw_label_maps, label_maps, tl_align_of
from .core import accuracy_table, fmt_mean_std, markdown_table, register_section

CONFIGS = {
    'DeiT-tiny': 'configs/tlalign/deit-tiny_1xb64_cutmix-tlalign_digits.py',
    'Swin-nano': 'configs/tlalign/swin-nano_1xb64_cutmix-tlalign_digits.py',
}
#: target -> the --cfg-options that select it
TARGETS = {'CutMix': {'model.target_transform': None}, 'CutMix + TL-Align': {}}
RMSE_IMAGES = 297  # the whole digits validation split
MIX_SEED = 0


def _rmse(model, cfg) -> float:
    """RMSE between the area and the aligned own share over the validation images, one fixed mixing draw."""
    np.random.seed(MIX_SEED)
    torch.manual_seed(MIX_SEED)
    return alignment_rmse(model, build_dataloader(cfg, 'val', 64, 0), RMSE_IMAGES).rmse


def _untrained_rmse(ctx, run) -> float:
    """The RMSE of ``run``'s model at its initialisation (the config's init with the run's seed)."""
    from mmengine.registry import DefaultScope
    from mmvitreg.utils import load_config
    from .core import REPO
    cfg = load_config(str(REPO / run.config), run.cfg_options)
    torch.manual_seed(run.seed)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return _rmse(build_model(cfg, None, 'cpu'), cfg)


def _label_maps_figure(ctx, run) -> str:
    """Fig. 5 for one trained model: 4 mixed validation images, their initial and aligned label maps (the first
    draw from seed ``MIX_SEED`` on whose box is not empty: on a 4x4 grid CutMix's box often clips to nothing)."""
    model, cfg = ctx.load_model(run)
    batch = next(iter(build_dataloader(cfg, 'val', 4, 0)))
    tl = tl_align_of(model)
    for seed in range(MIX_SEED, MIX_SEED + 100):
        np.random.seed(seed)
        torch.manual_seed(seed)
        inputs, plan, trace = align_batch(model, batch, tl)
        if plan.lam.max() < 1:
            break
    dp = model.data_preprocessor
    images = (inputs * dp.std + dp.mean) / 255.
    name = f'{ctx.section}_label_maps.png'
    (ctx.out_dir / 'claims').mkdir(parents=True, exist_ok=True)
    draw_label_maps(str(ctx.out_dir / 'claims' / name), images, plan.mask, label_maps(trace, range(tl.num_layers)),
                    plan.lam, tl.aligned_weights(trace), f'{run.tag}, seed {run.seed}: labels after every block')
    return f'![{ctx.section} label maps](claims/{name})'


@register_section('tl_align', 'TL-Align: aligned token labels for CutMix', order=50, budget_min=10)
def run(ctx) -> str:
    epochs = ctx.pick(full=12, ci=1)
    parts, rmse_rows, figure = [], [], ''
    for backbone, config in CONFIGS.items():
        runs = {f'{backbone} {target}': [ctx.train_and_test(config, seed, options, epochs=epochs,
                                                            tag=f'{backbone}-{"tla" if not options else "cutmix"}')
                                         for seed in ctx.seeds]
                for target, options in TARGETS.items()}
        parts.append(accuracy_table(runs, baseline=f'{backbone} CutMix'))
        first = next(iter(runs.values()))[0]
        rmse_rows.append([backbone, 'untrained', f'{_untrained_rmse(ctx, first):.4f}', str(first.seed)])
        for label, model_runs in runs.items():
            values = []
            for r in model_runs:
                model, cfg = ctx.load_model(r)
                values.append(_rmse(model, cfg))
            rmse_rows.append([backbone, f'trained with {label[len(backbone) + 1:]}', fmt_mean_std(values, 4),
                              ' '.join(str(r.seed) for r in model_runs)])
        if backbone == 'DeiT-tiny':
            figure = _label_maps_figure(ctx, runs[f'{backbone} CutMix + TL-Align'][0])
    rmse = markdown_table(['backbone', 'model', f'RMSE(lam, w) over {RMSE_IMAGES} val images', 'seeds'], rmse_rows)
    return (f'Claim (paper Tables 1, 7; Fig. 3, 5): replacing CutMix\'s area target by the label propagated '
            f'with the tokens (every block\'s head-mean attention, residual average, Swin merging) improves '
            f'top-1, and the two targets differ (RMSE, larger for DeiT than for Swin).\n\n'
            f'Each model: {epochs} epoch(s) of the digits config (its 30-epoch schedule scaled), the same token-aligned '
            f'CutMix; only the target differs (`--cfg-options model.target_transform=None` for CutMix).\n\n'
            + '\n\n'.join(parts)
            + f'\n\nRMSE between the area share lam and the aligned share w of each mixed validation image '
            f'(the same CutMix draw for every model, seed {MIX_SEED}; the two targets differ by +-(w - lam) in '
            f'the two mixed classes):\n\n{rmse}\n\n{figure}\n')
