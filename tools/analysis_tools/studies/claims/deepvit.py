"""DeepViT on the digits: does re-attention keep a deep ViT's blocks from collapsing, and does it pay?

Paper: Zhou et al., *DeepViT: Towards Deeper Vision Transformer*, https://arxiv.org/abs/2103.11886.
Claims tested (paper §3, §5.2):

* attention collapse: in a deep plain ViT the attention maps of adjacent blocks become alike — the
  number of *similar blocks* (Eq. 2 similarity with the adjacent blocks >= 90%, Fig. 3, Table 4)
  grows with depth — and re-attention brings it to zero (Table 4);
* the block outputs stop changing: their cosine similarity to the last block's output is high for
  the late blocks of a plain ViT and lower with re-attention (Fig. 4 right, Fig. 7(b));
* re-attention improves top-1 at equal depth (Table 4).

Models: ``configs/deepvit/deepvit-tiny_1xb64_digits.py`` (its recipe: AdamW with warm-up and cosine,
label smoothing, drop path 0.1; its Mixup + CutMix are switched off: in a schedule this short they
leave a 12-block model at about 60% top-1) made deep and narrow so that 6 runs fit the section's 10 minutes:
``DEPTH`` blocks of ``DIMS`` dims (16 per head, MLP ratio 3) on 8x8-pixel patches (a 4x4 grid and a
cls token), once with self-attention in every block (ViT) and once with re-attention in every block
(as the paper's 16B/24B/32B, Table 4), ``EPOCHS`` epochs, 3 seeds.

Measurements on the 297 validation images of each trained model, through the token trace:

* Eq. 2 and the similar blocks: :class:`studies.attention_similarity.AttentionSimilarity` (the similarity ratio
  is the mean Eq. 2 similarity with the adjacent block on each side; similar when >= 0.9). For
  re-attention the maps are those that multiply ``V``: after the head transform and the BatchNorm
  over heads, which centres them, so their Eq. 2 similarity is not comparable one to one with
  softmax maps;
* feature similarity to the last block (our reading of Fig. 4's "cosine similarity between feature
  maps"): for block ``l`` the cosine of each token's output ``x_l[t]`` with the last block's
  ``x_L[t]``, averaged over tokens (cls included) and images. Unaffected by the norm's centring.
"""

import torch

from mmvitreg.models.trace import TokenTrace

from ..attention_similarity import AttentionSimilarity
from .core import accuracy_table, figure, fmt_mean_std, markdown_table, mean_std, register_section, verdict

CONFIG = 'configs/deepvit/deepvit-tiny_1xb64_digits.py'
DEPTH, DIMS, PATCH, EPOCHS = 12, 64, 8, 10
MODELS = {'ViT (self-attention)': 'msa', 'DeepViT (re-attention)': 'reattn'}


def model_options(attn: str) -> dict:
    return {
        'model.backbone.arch.num_layers': DEPTH,
        'model.backbone.arch.embed_dims': DIMS,
        'model.backbone.arch.num_heads': DIMS // 16,
        'model.backbone.arch.feedforward_channels': 3 * DIMS,
        'model.backbone.arch.attn_types': [attn] * DEPTH,
        'model.backbone.patch_size': PATCH,
        'model.head.in_channels': DIMS,
        'model.train_cfg': None,
    }


@torch.no_grad()
def measure(ctx, run):
    """``(number of similar blocks, (L,) adjacent similarity ratio, (L,) feature similarity to the last block)``."""
    model, cfg = ctx.load_model(run)
    blocks = tuple(range(DEPTH))
    attn = AttentionSimilarity(DEPTH)
    feature_sum, images = torch.zeros(DEPTH, dtype=torch.float64), 0
    for inputs, _ in ctx.val_batches(model, cfg):
        trace = TokenTrace(token_layers=blocks, attn_layers=blocks)
        model.backbone(inputs, trace=trace)
        attn.update([trace.attn[i] for i in blocks])
        last = trace.tokens[DEPTH - 1]
        feature_sum += torch.stack(
            [torch.cosine_similarity(trace.tokens[i], last, dim=-1).mean(-1).sum() for i in blocks]
        ).double()
        images += inputs.shape[0]
    result = attn.compute()
    return result.num_similar_blocks, result.ratio.tolist(), (feature_sum / images).tolist()


def curves(ax, values, label, color):
    """Mean over seeds with a ±1 std band; blocks numbered from 1 as in the paper."""
    t = torch.tensor(values)
    m, s = t.mean(0), (t.std(0) if len(values) > 1 else torch.zeros(t.shape[1]))
    x = range(1, t.shape[1] + 1)
    ax.plot(x, m, '-o', ms=3, color=color, label=label)
    ax.fill_between(x, m - s, m + s, color=color, alpha=0.2)


@register_section('deepvit', 'DeepViT: re-attention against attention collapse', order=10, budget_min=10)
def run(ctx) -> str:
    runs, stats = {}, {}
    for name, attn in MODELS.items():
        runs[name] = [
            ctx.train_and_test(CONFIG, seed, model_options(attn), tag=attn, epochs=EPOCHS) for seed in ctx.seeds
        ]
        stats[name] = [measure(ctx, r) for r in runs[name]]

    fig, (left, right) = figure(1, 2, figsize=(11, 4))
    for (name, seeds), color in zip(stats.items(), ('tab:blue', 'tab:red')):
        curves(left, [s[1] for s in seeds], name, color)
        curves(right, [s[2] for s in seeds], name, color)
    left.axhline(0.9, color='gray', ls=':', lw=1, label='similar-block threshold (90%)')
    left.set(
        xlabel='block',
        ylabel='Eq. 2 similarity with adjacent blocks',
        title='Attention similarity of adjacent blocks (Fig. 3/7a)',
    )
    right.set(
        xlabel='block',
        ylabel='cosine similarity to the last block',
        title='Block outputs vs the last block (Fig. 4 right)',
    )
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    plot = ctx.save_figure(fig, 'similarity')

    vit, deepvit = MODELS
    late = slice(DEPTH // 2, DEPTH - 1)  # the later half, the last block itself excluded
    similar = {name: [s[0] for s in seeds] for name, seeds in stats.items()}
    adjacent = {name: [mean_std(s[1])[0] for s in seeds] for name, seeds in stats.items()}
    late_sim = {name: [mean_std(s[2][late])[0] for s in seeds] for name, seeds in stats.items()}
    top1 = {name: [r.metrics['accuracy/top1'] for r in model_runs] for name, model_runs in runs.items()}
    rows = [
        [name, ' / '.join(map(str, similar[name])), fmt_mean_std(adjacent[name], 3), fmt_mean_std(late_sim[name], 3)]
        for name in MODELS
    ]
    collapse = (
        'the plain ViT has none at this depth and scale, so the count cannot show the claim here '
        '(the paper sees collapse from about block 17 of 32 on ImageNet)'
        if max(similar[vit]) == 0
        else f'ViT {fmt_mean_std(similar[vit], 1)}, re-attention {fmt_mean_std(similar[deepvit], 1)} of {DEPTH}'
    )
    tokens = (32 // PATCH) ** 2 + 1
    return f"""{DEPTH}-block, {DIMS}-dim ViT on {PATCH}x{PATCH}-pixel patches of the 32x32 digits ({tokens} tokens),
self-attention vs re-attention in every block, trained {ctx.pick(full=EPOCHS, ci=1)} epochs each with the
recipe of `{CONFIG}` without its Mixup / CutMix; statistics over the 297 validation images of each
trained model (one value per seed, mean ± std).

{
        markdown_table(
            [
                'model',
                'similar blocks (per seed)',
                'mean adjacent attention similarity (Eq. 2)',
                f'mean feature similarity to the last block, blocks {DEPTH // 2 + 1}-{DEPTH - 1}',
            ],
            rows,
        )
    }

{accuracy_table(runs, baseline=vit)}

{plot}

- Similar blocks (Eq. 2 similarity >= 90% with the adjacent blocks): {collapse}.
- Adjacent attention similarity, re-attention vs self-attention: **{
        verdict(adjacent[deepvit], adjacent[vit], higher_is_better=False)
    }** (lower is better). Re-attention's maps are not softmax maps: they are mixed over
  heads by Θ and centred by its BatchNorm over heads, which alone brings their Eq. 2 similarity near 0 (so
  no similar block) whatever the attention learned. The feature similarity below is the comparison that
  holds for both.
- Late-block feature similarity to the last block, re-attention vs self-attention:
  **{verdict(late_sim[deepvit], late_sim[vit], higher_is_better=False)}** (lower: the late blocks still change
  the features; not affected by the norm's centring).
- Top-1, re-attention vs self-attention: **{verdict(top1[deepvit], top1[vit])}**.
"""
