"""TL-Align diagnostics: how far the aligned target is from the area target (paper Fig. 3), and the token
label maps before and after alignment (paper Fig. 5). Used by ``tools/analysis_tools/tl_align_rmse.py`` and
``tools/analysis_tools/tl_align_label_maps.py``."""

import math
from dataclasses import dataclass
from typing import Dict, Iterable, Sequence, Tuple

import torch
from torch import Tensor, nn

from mmvitreg.models.target_transforms import TLAlign
from mmvitreg.models.trace import MixPlan, TokenTrace
from mmvitreg.utils import first_images


def tl_align_of(model: nn.Module) -> TLAlign:
    """The model's own :class:`TLAlign`, or one over all its backbone's blocks (a CutMix-only model: what
    alignment would have made of its targets)."""
    transform = getattr(model, 'target_transform', None)
    if isinstance(transform, TLAlign):
        return transform
    backbone = getattr(model, 'backbone', None)
    if getattr(backbone, 'trace_spec', None) is None:
        raise TypeError(
            f'TL-Align diagnostics need a backbone that takes a token trace; {type(backbone).__name__} '
            'does not (use mmvitreg.VisionTransformer, DeiT presets, DeepViT or SwinTransformer)'
        )
    return TLAlign()


@torch.no_grad()
def align_batch(model: nn.Module, batch: dict, tl: TLAlign) -> Tuple[Tensor, MixPlan, TokenTrace]:
    """Mix ``batch`` with the model's own mixing plan (``train_cfg.mix``) and carry TL-Align's labels
    through its backbone: ``(mixed inputs (B, 3, H, W), plan, trace)``, ``trace.streamed`` filled.

    The backbone runs as the model is set (eval mode: no drop path); the plan is drawn with numpy's
    and torch's global generators (seed them for a fixed draw)."""
    data = model.data_preprocessor(batch, True)
    plan = data.get('mix_plan')
    if plan is None:
        raise ValueError(
            'the model draws no mixing plan: TL-Align diagnostics need a TokenClassifier with '
            "train_cfg=dict(mix=dict(type='mmvitreg.PatchCutMix', patch_size=...))"
        )
    trace = TokenTrace.for_request(tl.trace_request, mix=plan)
    model.backbone(data['inputs'], trace=trace)
    return data['inputs'], plan, trace


@dataclass
class AlignmentRMSE:
    """The distance between the plain CutMix target and the aligned target over a data set (paper Fig. 3).

    With ``lam`` the own share of the area target and ``w`` that of the aligned one, the two targets
    differ by ``+-(w - lam)`` in the two mixed classes; reported over images:

    Args:
        rmse (float): ``sqrt(mean (w - lam)^2)``.
        mean_abs (float): ``mean |w - lam|``.
        mean_lam (float): mean ``lam``.
        mean_aligned (float): mean ``w``.
        num_images (int): images measured.
    """

    rmse: float
    mean_abs: float
    mean_lam: float
    mean_aligned: float
    num_images: int


def alignment_rmse(model: nn.Module, batches: Iterable[dict], num_images: int, split: str = 'data') -> AlignmentRMSE:
    """:class:`AlignmentRMSE` of ``model`` over the first ``num_images`` images of ``batches`` (data
    loader batches of the ``split``), each batch mixed by the model's plan, with a progress bar."""
    tl = tl_align_of(model)
    w_all, lam_all = [], []
    for batch, take in first_images(batches, num_images, split):
        _, plan, trace = align_batch(model, batch, tl)
        w_all.append(tl.aligned_weights(trace)[:take].double().cpu())
        lam_all.append(plan.lam[:take].double().cpu())
    seen = sum(len(w) for w in w_all)
    if not seen:
        raise ValueError('no images to measure')
    w, lam = torch.cat(w_all), torch.cat(lam_all)
    diff = w - lam
    return AlignmentRMSE(
        math.sqrt(float((diff**2).mean())), float(diff.abs().mean()), float(lam.mean()), float(w.mean()), seen
    )


def label_maps(trace: TokenTrace, layers: Sequence[int]) -> Dict[int, Tensor]:
    """Own-label share of every patch token after the chosen blocks (negative indices count from the last),
    on the block's grid: ``{block: (B, H_l, W_l)}``. The map before the first block is ``trace.mix.mask``."""
    out = {}
    for layer in layers:
        i = trace.index(layer)
        if i not in trace.streamed:
            raise IndexError(f'block {layer} is not in the trace (blocks 0..{trace.num_layers - 1})')
        w = trace.streamed[i][:, trace.num_extra_tokens :, 0]
        out[i] = w.reshape(w.shape[0], *trace.grids[i])
    return out


def draw_label_maps(
    path: str, images: Tensor, initial: Tensor, maps: Dict[int, Tensor], lam: Tensor, aligned: Tensor, title: str = ''
) -> None:
    """Write a PNG: per sample (rows) the mixed image, the initial label map and the aligned maps after the
    chosen blocks (paper Fig. 5; red = own label, blue = the partner's).

    Args:
        images (Tensor): ``(B, 3, H, W)`` mixed images in ``[0, 1]``, RGB.
        initial (Tensor): ``(B, Hg, Wg)`` initial own share (the plan's token mask).
        maps (Dict[int, Tensor]): block -> ``(B, H_l, W_l)`` aligned own share (:func:`label_maps`).
        lam (Tensor): ``(B,)`` the area target's own share.
        aligned (Tensor): ``(B,)`` the aligned target's own share.
    """
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    B = images.shape[0]
    cols = 2 + len(maps)
    fig, axes = plt.subplots(B, cols, figsize=(2.4 * cols, 2.4 * B), squeeze=False)
    for b in range(B):
        panels = [
            (f'mixed: lam {float(lam[b]):.3f}, aligned {float(aligned[b]):.3f}', None),
            ('initial labels', initial[b]),
        ]
        panels += [(f'after block {i + 1}', m[b]) for i, m in maps.items()]
        for ax, (name, m) in zip(axes[b], panels):
            if m is None:
                ax.imshow(images[b].permute(1, 2, 0).clamp(0, 1).cpu().numpy())
            else:
                ax.imshow(m.float().cpu().numpy(), cmap='bwr', vmin=0, vmax=1)
                name += f'\ntoken mean {float(m.float().mean()):.3f}'
            ax.set_title(name, fontsize=8)
            ax.axis('off')
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
