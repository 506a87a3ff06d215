"""Side-by-side training-step benchmark: a model under test against its baseline, in one run.

A *case* pairs the model under test with a baseline and a batch maker; :data:`CASES` holds them by
name and ``tools/analysis_tools/benchmark_train_step.py --case NAME`` runs them. A training step is
mmengine's ``model.train_step(data, optim_wrapper)``: data preprocessing, forward, loss, backward and
an AdamW step.

Time: both models live in one process; after warm-up steps their steps alternate (the order flips
every repetition, so slow drifts of the machine hit both alike), each step timed with
``time.perf_counter`` (after ``torch.cuda.synchronize`` on CUDA), or with the process's CPU time
(``clock='cpu'``, for a machine shared with other work); the median per model and their ratio are
reported.

Peak memory: each model runs its warm-up and a few steps again in a fresh process of its own
(forked from a fork server that has only imported the libraries; the two at once), so neither
model's allocations or allocator caches count against the other.

* CUDA: ``torch.cuda.max_memory_allocated()`` over those steps minus what was allocated before the
  model was built (parameters, gradients, optimizer state and the activation peak).
* CPU: the process's peak resident set size (``VmHWM`` in ``/proc/self/status``, the kernel's own
  high-water mark, reset through ``/proc/self/clear_refs``) minus the resident size just before
  the model is built: the same quantities as on CUDA, as the kernel sees them.

Before that, one step of the case's tiny model pages in the operators' code and creates the math
libraries' workspaces, so that neither is counted as the model's memory. ``tracemalloc`` cannot see
  torch's C++ allocations, and ``torch.profiler(profile_memory=True)`` reports per-operator
  allocations rather than a process peak, so neither measures what a user runs out of.

Add a case with :func:`register_case` (or :func:`register_with_without`, for a model with and without a
technique) at the end of this module (a few lines: two model builders,
a batch maker, a target); the memory processes find cases by name when they import this module.
"""
import functools
import gc
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

# builder(img_size, tiny) -> an mmengine model with a data_preprocessor and train_step;
# tiny=True gives a toy version of the same comparison (for smoke tests, not for measuring)
ModelBuilder = Callable[[int, bool], nn.Module]
# batch maker(batch_size, img_size) -> the `data` dict a model's train_step takes
BatchMaker = Callable[[int, int], dict]

ROLES = ('model', 'baseline')


@dataclass(frozen=True)
class TrainStepCase:
    """One comparison of :mod:`studies.train_step_benchmark`.

    Args:
        description (str): What is compared with what, printed with the results.
        model (ModelBuilder): Builds the model under test, ``(img_size, tiny) -> model``.
        baseline (ModelBuilder): Builds the baseline, ``(img_size, tiny) -> model``.
        make_batch (BatchMaker): ``(batch_size, img_size) -> data`` for ``model.train_step``.
        max_time_ratio (float): The target: median step time of the model over the baseline's.
    """

    description: str
    model: ModelBuilder
    baseline: ModelBuilder
    make_batch: BatchMaker
    max_time_ratio: float

    def build(self, role: str, img_size: int, tiny: bool) -> nn.Module:
        if role not in ROLES:
            raise ValueError(f'unknown role {role!r}; choose from {ROLES}')
        return getattr(self, role)(img_size, tiny)


CASES: Dict[str, TrainStepCase] = {}


def register_case(name: str, case: TrainStepCase) -> None:
    """Add a case under ``name`` (an error if the name is taken)."""
    if name in CASES:
        raise KeyError(f'a benchmark case named {name!r} exists already')
    CASES[name] = case


def get_case(name: str) -> TrainStepCase:
    if name not in CASES:
        raise KeyError(f'unknown benchmark case {name!r}; known cases: {sorted(CASES)}')
    return CASES[name]


# ---------------------------------------------------------------------------------------------
# the training step and its measurements


def _optim_wrapper(model: nn.Module):
    from mmengine.optim import OptimWrapper
    return OptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05))


def _sync(device: str) -> None:
    if device.startswith('cuda'):
        torch.cuda.synchronize(device)


def _setup(case: TrainStepCase, role: str, img_size: int, batch_size: int, tiny: bool, device: str):
    torch.manual_seed(0)
    model = case.build(role, img_size, tiny).to(device).train()
    data = case.make_batch(batch_size, img_size)
    return model, _optim_wrapper(model), data


CLOCKS = {'wall': time.perf_counter, 'cpu': time.process_time}


def time_case(case: TrainStepCase, *, batch_size: int, img_size: int, repeats: int, warmup: int,
              device: str, tiny: bool = False, clock: str = 'wall') -> Dict[str, List[float]]:
    """Step times (s) of both models, interleaved after ``warmup`` steps each: ``{role: [times]}``.

    ``clock``: ``'wall'`` (``time.perf_counter``) or ``'cpu'`` (``time.process_time``, the CPU time of
    all the process's threads: robust against other processes on a shared machine, exact with one
    thread; with more, OpenMP threads waiting for each other add their spinning).
    """
    if clock not in CLOCKS:
        raise ValueError(f'unknown clock {clock!r}; choose from {sorted(CLOCKS)}')
    now = CLOCKS[clock]
    setups = {role: _setup(case, role, img_size, batch_size, tiny, device) for role in ROLES}
    for _ in range(warmup):
        for model, optim, data in setups.values():
            model.train_step(data, optim)
    _sync(device)
    times = {role: [] for role in ROLES}
    for r in range(repeats):
        for role in (ROLES if r % 2 == 0 else ROLES[::-1]):
            model, optim, data = setups[role]
            start = now()
            model.train_step(data, optim)
            _sync(device)
            times[role].append(now() - start)
    return times


def _resident_kib(field: str) -> int:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    raise RuntimeError(f'{field} not found in /proc/self/status')


def _reset_peak_resident_set() -> None:
    """Set this process's ``VmHWM`` to its current resident set size (Linux >= 4.0)."""
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')


def _peak_memory_in_this_process(case_name: str, role: str, img_size: int, batch_size: int, tiny: bool,
                                 device: str, steps: int, threads: Optional[int]) -> int:
    """Peak bytes of ``steps`` training steps of one model (run in a fresh process)."""
    if threads:
        torch.set_num_threads(threads)
    case = get_case(case_name)
    cuda = device.startswith('cuda')
    # one step of the case's tiny model first: it pages in the operators' code (shared-library pages
    # count in the resident set) and creates the math libraries' workspaces, none of it the model's
    warm_model, warm_optim, warm_data = _setup(case, role, img_size, 2, True, device)
    warm_model.train_step(warm_data, warm_optim)
    del warm_model, warm_optim, warm_data
    gc.collect()
    _sync(device)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = _resident_kib('VmRSS') * 1024
        _reset_peak_resident_set()
    model, optim, data = _setup(case, role, img_size, batch_size, tiny, device)
    for _ in range(steps):
        model.train_step(data, optim)
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device) if cuda else _resident_kib('VmHWM') * 1024
    return peak - before


def _memory_context():
    """Processes forked from a fork server that has imported the libraries and run nothing else."""
    ctx = get_context('forkserver')
    ctx.set_forkserver_preload(['mmpretrain.models', 'mmvitreg.models', __name__])
    return ctx


def peak_memory(case_name: str, *, img_size: int, batch_size: int, device: str, steps: int = 2,
                tiny: bool = False, threads: Optional[int] = None) -> Dict[str, int]:
    """Peak memory (bytes) of training steps of each model of a case: ``{role: bytes}``.

    Each model runs in a fresh process of its own; the two processes run at the same time (memory
    does not depend on the other's CPU use; on CUDA they share the device's memory, not its counters).
    """
    ctx = _memory_context()
    with ExitStack() as stack:  # one single-worker pool per model: a process of its own (any Python)
        futures = {
            role: stack.enter_context(ProcessPoolExecutor(max_workers=1, mp_context=ctx)).submit(
                _peak_memory_in_this_process, case_name, role, img_size, batch_size, tiny, device, steps, threads)
            for role in ROLES
        }
        return {role: future.result() for role, future in futures.items()}


@dataclass
class CaseResult:
    """Medians (s), peak memories (bytes) and the verdict of one case."""

    name: str
    case: TrainStepCase
    median: Dict[str, float]
    memory: Dict[str, int]

    @property
    def time_ratio(self) -> float:
        return self.median['model'] / self.median['baseline']

    @property
    def memory_ratio(self) -> float:
        return self.memory['model'] / self.memory['baseline']

    @property
    def passed(self) -> bool:
        return self.time_ratio <= self.case.max_time_ratio

    def report(self, judge: bool = True) -> str:
        """The table of times and memories, the ratios and (if ``judge``) the verdict."""
        mib = 2**20
        verdict = ('PASS' if self.passed else 'FAIL') if judge else 'not judged'

        lines = [
            f'{"":10s} {"step time (ms, median)":>24s} {"peak memory (MiB)":>19s}',
            f'{"model":10s} {self.median["model"] * 1e3:24.1f} {self.memory["model"] / mib:19.1f}',
            f'{"baseline":10s} {self.median["baseline"] * 1e3:24.1f} {self.memory["baseline"] / mib:19.1f}',
            f'time ratio {self.time_ratio:.3f} (target <= {self.case.max_time_ratio:.3f}): '
            f'{verdict};  memory ratio {self.memory_ratio:.3f}',
        ]
        return '\n'.join(lines)


def run_case(name: str, *, batch_size: int, img_size: int, repeats: int, warmup: int, device: str,
             tiny: bool = False, threads: Optional[int] = None, clock: str = 'wall') -> CaseResult:
    """Time both models of a case side by side, then measure each one's peak memory."""
    case = get_case(name)
    times = time_case(case, batch_size=batch_size, img_size=img_size, repeats=repeats, warmup=warmup,
                      device=device, tiny=tiny, clock=clock)
    memory = peak_memory(name, img_size=img_size, batch_size=batch_size, device=device,
                         steps=max(warmup, 1) + 1, tiny=tiny, threads=threads)
    return CaseResult(name, case, {role: statistics.median(t) for role, t in times.items()}, memory)


# ---------------------------------------------------------------------------------------------
# cases


def classification_batch(batch_size: int, img_size: int, num_classes: int = 1000) -> dict:
    """Random images (pixel values 0..255) and labels, as mmpretrain's ``ClsDataPreprocessor`` takes them."""
    from mmpretrain.structures import DataSample
    g = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, 256, (batch_size, 3, img_size, img_size), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, num_classes, (batch_size, ), generator=g)
    return dict(inputs=inputs, data_samples=[DataSample().set_gt_label(int(y)) for y in labels])


def register_with_without(name: str, description: str, builder: Callable[[bool], ModelBuilder],
                          max_time_ratio: float, make_batch: BatchMaker = classification_batch) -> None:
    """Add a case that times ``builder(True)`` (the model with a technique) against ``builder(False)``
    (the same model without it)."""
    register_case(name, TrainStepCase(description, builder(True), builder(False), make_batch, max_time_ratio))


def build_in_mmpretrain(cfg: dict) -> nn.Module:
    """``cfg`` built by mmpretrain's model registry, under its default scope."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


# the ImageNet mean / std of mmpretrain's recipes, for the token-technique classifiers
IMAGENET_PREPROCESSOR = dict(num_classes=1000, mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                             to_rgb=True)


def vit_classifier(backbone: dict, embed_dims: int, num_classes: int = 1000) -> nn.Module:
    """mmpretrain's ``ImageClassifier`` with a ViT cls-token head over ``backbone``."""
    return build_in_mmpretrain(
        dict(
            type='ImageClassifier',
            backbone=backbone,
            head=dict(type='VisionTransformerClsHead', num_classes=num_classes, in_channels=embed_dims),
            data_preprocessor=dict(
                type='ClsDataPreprocessor', num_classes=num_classes, mean=[127.5] * 3, std=[127.5] * 3,
                to_rgb=True)))


def _deepvit_arch(name: str, tiny: bool, **overrides) -> dict:
    """A DeepViT preset as an arch dict; ``tiny`` keeps its layout but shrinks it to 4 blocks of 48 channels."""
    from mmvitreg.models.backbones import DeepViT
    arch = dict(DeepViT.arch_zoo[name])
    if tiny:
        attn = arch['attn_types']
        attn = attn if isinstance(attn, str) else list(attn)[-4:]  # keep the last blocks' kinds
        arch.update(embed_dims=48, num_layers=4, num_heads=4, feedforward_channels=144, attn_types=attn)
        if arch.get('stem') is not None:
            arch['stem'] = dict(arch['stem'], channels=16)
    arch.update(overrides)
    return arch


def _deepvit(name: str, **overrides) -> ModelBuilder:
    def build(img_size: int, tiny: bool) -> nn.Module:
        arch = _deepvit_arch(name, tiny, **overrides)
        return vit_classifier(dict(type='mmvitreg.DeepViT', arch=arch, img_size=img_size), arch['embed_dims'])

    return build


def _mmpretrain_vit_like(name: str) -> ModelBuilder:
    """mmpretrain's own ``VisionTransformer`` with the numbers of a plain DeepViT preset."""

    def build(img_size: int, tiny: bool) -> nn.Module:
        arch = _deepvit_arch(name, tiny)
        numbers = {k: arch[k] for k in ('embed_dims', 'num_layers', 'num_heads', 'feedforward_channels')}
        return vit_classifier(
            dict(type='VisionTransformer', arch=numbers, img_size=img_size, patch_size=16,
                 norm_cfg=dict(type='LN', eps=1e-6)), arch['embed_dims'])

    return build


register_case(
    'deepvit-s-vs-msa',
    TrainStepCase(
        description='DeepViT-S (re-attention in its last 5 blocks) vs. the same model with standard '
        'multi-head self-attention in every block',
        model=_deepvit('s'),
        baseline=_deepvit('s', attn_types='msa'),
        make_batch=classification_batch,
        max_time_ratio=1.10))

register_case(
    'plain-vs-mmpretrain',
    TrainStepCase(
        description='the plain ViT-16B preset of mmvitreg.DeepViT vs. mmpretrain\'s VisionTransformer '
        'with the same numbers (the plain preset must keep >= 98% of its speed)',
        model=_deepvit('vit-16b'),
        baseline=_mmpretrain_vit_like('vit-16b'),
        make_batch=classification_batch,
        max_time_ratio=1 / 0.98))


def token_label_batch(batch_size: int, img_size: int, num_classes: int = 1000, topk: int = 5,
                      patch_size: int = 16, map_size: int = 18) -> dict:
    """:func:`classification_batch` plus each sample's packed label map, as the data pipeline leaves it.

    Each sample carries a random official-format ``(2, topk, map_size, map_size)`` fp16 map
    (``map_size=18``: NFNet-F6 at 576) packed by :class:`~mmvitreg.datasets.TokenLabelTarget`, so
    the timed step includes the per-batch reading of the token targets in the data preprocessor.
    """
    import numpy as np

    from mmvitreg.datasets.label_maps import TokenLabelMap
    from mmvitreg.datasets.token_label_target import TokenLabelTarget
    data = classification_batch(batch_size, img_size, num_classes)
    rng = np.random.default_rng(1)
    packer = TokenLabelTarget(token_label_size=img_size // patch_size, topk=topk)
    for sample in data['data_samples']:
        logits = np.sort(rng.normal(size=(topk, map_size, map_size)), axis=0)[::-1]
        index = np.argsort(rng.random((num_classes, map_size, map_size)), axis=0)[:topk]
        label_map = np.stack([logits, index]).astype(np.float16)
        sample.set_field(packer.pack(TokenLabelMap(label_map, (img_size, img_size)), (img_size, img_size)),
                         'token_label_map')
    return data


def _lvvit_arch(tiny: bool) -> dict:
    """LV-ViT-S as an arch dict; ``tiny`` shrinks it to 4 blocks of 48 channels."""
    from mmvitreg.models.backbones import LVViT
    arch = dict(LVViT.arch_zoo['s'])
    if tiny:
        arch.update(embed_dims=48, num_layers=4, num_heads=4, feedforward_channels=144,
                    stem=dict(arch['stem'], channels=16))
    return arch


def _lvvit_token_labeling(img_size: int, tiny: bool) -> nn.Module:
    """LV-ViT-S trained with token labeling (beta 0.5) and MixToken, as configs/lvvit."""
    arch = _lvvit_arch(tiny)
    return build_in_mmpretrain(
        dict(
            type='mmvitreg.TokenClassifier',
            backbone=dict(type='mmvitreg.LVViT', arch=arch, img_size=img_size, out_type='raw'),
            head=dict(type='mmvitreg.TokenLabelHead', num_classes=1000, in_channels=arch['embed_dims']),
            train_cfg=dict(token_mix=dict(type='mmvitreg.MixToken', patch_size=16)),
            data_preprocessor=IMAGENET_PREPROCESSOR))


def _lvvit_plain(img_size: int, tiny: bool) -> nn.Module:
    """The same LV-ViT-S trained with label-smoothed CE on the class token only."""
    arch = _lvvit_arch(tiny)
    return vit_classifier(dict(type='mmvitreg.LVViT', arch=arch, img_size=img_size), arch['embed_dims'])


register_case(
    'lvvit-tl-vs-ce',
    TrainStepCase(
        description='LV-ViT-S with token labeling (dense aux head, beta 0.5) + MixToken vs. the same backbone '
        'trained with plain CE on the class token',
        model=_lvvit_token_labeling,
        baseline=_lvvit_plain,
        make_batch=token_label_batch,
        max_time_ratio=1.03))


def _swin_t(backbone_type: str, img_size: int, tiny: bool) -> Tuple[dict, int, int]:
    """Swin-T (``tiny``: 2 stages of 32 channels, window 4) as ``(backbone config, output channels, blocks)``."""
    if tiny:
        arch, window, out_index, dims, depth = dict(embed_dims=32, depths=[2, 2], num_heads=[1, 2]), 4, 1, 64, 4
    else:
        arch, window, out_index, dims, depth = 'tiny', 7, 3, 768, 12
    return dict(type=backbone_type, arch=arch, img_size=img_size, window_size=window, drop_path_rate=0.2,
                out_indices=(out_index, )), dims, depth


def _swin_classifier(backbone_type: str) -> ModelBuilder:
    """Swin-T in mmpretrain's Swin classifier recipe, with ``backbone_type`` as the backbone
    (``'mmvitreg.SwinTransformer'`` or mmpretrain's ``'SwinTransformer'``)."""

    def build(img_size: int, tiny: bool) -> nn.Module:
        backbone, dims, _ = _swin_t(backbone_type, img_size, tiny)
        return build_in_mmpretrain(
            dict(
                type='ImageClassifier',
                backbone=backbone,
                neck=dict(type='GlobalAveragePooling'),
                head=dict(type='LinearClsHead', num_classes=1000, in_channels=dims),
                data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=1000, mean=[127.5] * 3,
                                       std=[127.5] * 3, to_rgb=True)))

    return build


register_case(
    'swin-vs-mmpretrain',
    TrainStepCase(
        description='mmvitreg.SwinTransformer without a trace (fused window attention) vs. mmpretrain\'s '
        'SwinTransformer, Swin-T, same weights layout (must keep >= 98% of its speed)',
        model=_swin_classifier('mmvitreg.SwinTransformer'),
        baseline=_swin_classifier('SwinTransformer'),
        make_batch=classification_batch,
        max_time_ratio=1 / 0.98))


def _cutmix_classifier(backbone: dict, head: dict, num_layers: int, patch_size: int, tl_align: bool,
                       neck: Optional[dict] = None, representation: str = 'weights',
                       aux_losses: Sequence[dict] = ()) -> nn.Module:
    """A classifier trained with TL-Align's token-aligned CutMix (:class:`~mmvitreg.models.mixing.PatchCutMix`)
    and label smoothing 0.1, with or without :class:`~mmvitreg.models.target_transforms.TLAlign` (carrying
    its labels in ``representation``), and with ``aux_losses``."""
    return build_in_mmpretrain(
        dict(
            type='mmvitreg.TokenClassifier',
            backbone=backbone,
            neck=neck,
            head=dict(head, num_classes=1000, loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1,
                                                        mode='original')),
            target_transform=dict(type='mmvitreg.TLAlign', num_layers=num_layers, representation=representation,
                                  num_classes=1000) if tl_align else None,
            aux_losses=list(aux_losses),
            train_cfg=dict(token_mix=dict(type='mmvitreg.PatchCutMix', patch_size=patch_size)),
            data_preprocessor=IMAGENET_PREPROCESSOR))


def _deit_cutmix(tl_align: bool, representation: str = 'weights') -> ModelBuilder:
    """DeiT-S (``tiny``: 4 blocks of 48 channels) with CutMix, with or without TL-Align."""

    def build(img_size: int, tiny: bool) -> nn.Module:
        arch = dict(embed_dims=48, num_layers=4, num_heads=3, feedforward_channels=192) if tiny else 'deit-small'
        dims, layers = (48, 4) if tiny else (384, 12)
        return _cutmix_classifier(
            dict(type='mmvitreg.VisionTransformer', arch=arch, img_size=img_size, drop_path_rate=0.1),
            dict(type='VisionTransformerClsHead', in_channels=dims), layers, 16, tl_align,
            representation=representation)

    return build


register_with_without(
    'deit-s-tlalign-vs-cutmix',
    'DeiT-S with CutMix + TL-Align (label weights propagated through all 12 attention maps) '
    'vs. the same model with the same token-aligned CutMix and the area target',
    _deit_cutmix, max_time_ratio=1.02)


def _swin_cutmix(tl_align: bool) -> ModelBuilder:
    """Swin-T in mmpretrain's Swin classifier recipe with CutMix on the 4-pixel token grid, with or without
    TL-Align."""

    def build(img_size: int, tiny: bool) -> nn.Module:
        backbone, dims, layers = _swin_t('mmvitreg.SwinTransformer', img_size, tiny)
        return _cutmix_classifier(backbone, dict(type='LinearClsHead', in_channels=dims), layers, 4, tl_align,
                                  neck=dict(type='GlobalAveragePooling'))

    return build


register_with_without(
    'swin-t-tlalign-vs-cutmix',
    'Swin-T with CutMix + TL-Align (label weights through every window attention, shift and '
    'merging) vs. the same model with the same token-aligned CutMix and the area target',
    _swin_cutmix, max_time_ratio=1.02)


register_case(
    'deit-s-tlalign-weights-vs-labels',
    TrainStepCase(
        description='DeiT-S with CutMix + TL-Align carrying the 2-dimensional (own, partner) label per token (in '
        'the fused attention\'s own kernel call) vs. the same carrying the official C = 1000 dimensional labels '
        '(their map formed beside the fused call)',
        model=_deit_cutmix(True),
        baseline=_deit_cutmix(True, 'labels'),
        make_batch=classification_batch,
        max_time_ratio=1.0))


def _diversepatch_losses(dims: int, contrastive: bool) -> list:
    """DiversePatch's losses (paper forms), the contrastive one only on isotropic backbones."""
    contrastive_loss = [dict(type='mmvitreg.PatchContrastiveLoss')] if contrastive else []
    return ([dict(type='mmvitreg.PatchCosineLoss')] + contrastive_loss
            + [dict(type='mmvitreg.PatchMixingLoss', num_classes=1000, in_channels=dims)])


def _deit_diversepatch(img_size: int, tiny: bool, with_losses: bool) -> nn.Module:
    """DeiT-S (``tiny``: 4 blocks of 48 channels) with token-aligned CutMix, with or without the three losses."""
    arch = dict(embed_dims=48, num_layers=4, num_heads=3, feedforward_channels=192) if tiny else 'deit-small'
    dims, layers = (48, 4) if tiny else (384, 12)
    return _cutmix_classifier(
        dict(type='mmvitreg.VisionTransformer', arch=arch, img_size=img_size, drop_path_rate=0.1),
        dict(type='VisionTransformerClsHead', in_channels=dims), layers, 16, False,
        aux_losses=_diversepatch_losses(dims, True) if with_losses else ())


def _swin_diversepatch(img_size: int, tiny: bool, with_losses: bool) -> nn.Module:
    """Swin-T with CutMix boxes aligned to the last stage (32 px), with or without the cosine and mixing losses."""
    backbone, dims, layers = _swin_t('mmvitreg.SwinTransformer', img_size, tiny)
    return _cutmix_classifier(backbone, dict(type='LinearClsHead', in_channels=dims), layers, 8 if tiny else 32,
                              False, neck=dict(type='GlobalAveragePooling'),
                              aux_losses=_diversepatch_losses(dims, False) if with_losses else ())


def _with_losses(classifier: Callable[[int, bool, bool], nn.Module]) -> Callable[[bool], ModelBuilder]:
    """``classifier(img_size, tiny, with_losses)`` as a builder for :func:`register_with_without`."""
    return lambda with_losses: functools.partial(classifier, with_losses=with_losses)


register_with_without(
    'deit-s-diversepatch-vs-plain', 'DeiT-S with the patch-wise cosine, contrastive and mixing losses (DiversePatch, '
    'paper forms) vs. the same model with the same token-aligned CutMix and the plain loss',
    _with_losses(_deit_diversepatch), max_time_ratio=1.03)
register_with_without(
    'swin-t-diversepatch-vs-plain', 'Swin-T with the patch-wise cosine and mixing losses on the last stage '
    '(DiversePatch; no contrastive loss across down-sampling) vs. the same model with the same CutMix and the plain '
    'loss', _with_losses(_swin_diversepatch), max_time_ratio=1.03)


def _drloc_classifier(backbone: dict, head: dict, neck: Optional[dict], drloc: Optional[dict]) -> nn.Module:
    """A classifier in mmpretrain's recipe (Mixup/CutMix, label smoothing 0.1) with DRLoc (paper form,
    ``drloc`` its options) as an auxiliary loss, or without (``drloc=None``)."""
    return build_in_mmpretrain(
        dict(
            type='mmvitreg.TokenClassifier',
            backbone=backbone,
            neck=neck,
            head=dict(head, num_classes=1000, loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1,
                                                        mode='original')),
            aux_losses=[dict(type='mmvitreg.DRLoc', **drloc)] if drloc else [],
            train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
            data_preprocessor=IMAGENET_PREPROCESSOR))


def _swin_drloc(with_drloc: bool) -> ModelBuilder:
    """Swin-T with or without DRLoc on its last stage (7x7 at 224), λ = 0.5 (paper)."""

    def build(img_size: int, tiny: bool) -> nn.Module:
        backbone, dims, _ = _swin_t('mmvitreg.SwinTransformer', img_size, tiny)
        drloc = dict(in_channels=dims, layers=(-1, ), loss_weight=0.5) if with_drloc else None
        return _drloc_classifier(backbone, dict(type='LinearClsHead', in_channels=dims),
                                 dict(type='GlobalAveragePooling'), drloc)

    return build


register_with_without(
    'swin-t-drloc',
    'Swin-T with DRLoc (m = 64 pairs per image on the last stage\'s 7x7 grid, read through the '
    'trace; MLP 2x768 -> 512 -> 512 -> 2) vs. the same model without it',
    _swin_drloc, max_time_ratio=1.02)


def _t2t_drloc(with_drloc: bool) -> ModelBuilder:
    """mmpretrain's T2T-ViT-t-14 (``tiny``: 2 blocks of 64 channels): with DRLoc, raw tokens (no trace) pooled
    2x2 to 7x7 (paper) and the cls token picked by ClsTokenNeck, λ = 0.1; without, mmpretrain's cls-token
    output."""

    def build(img_size: int, tiny: bool) -> nn.Module:
        dims = 64 if tiny else 384
        backbone = dict(type='T2T_ViT', img_size=img_size, embed_dims=dims, num_layers=2 if tiny else 14,
                        layer_cfgs=dict(num_heads=2 if tiny else 6, feedforward_channels=3 * dims),
                        drop_path_rate=0.1, out_type='raw' if with_drloc else 'cls_token')
        # tiny (the tool's smoke test runs it at 32x32): no pooling on the 2x2 grid
        drloc = dict(in_channels=dims, loss_weight=0.1, grid_pool=None if tiny else 'avg2x2',
                     num_pairs=4 if tiny else 64)
        return _drloc_classifier(backbone, dict(type='VisionTransformerClsHead', in_channels=dims),
                                 dict(type='mmvitreg.ClsTokenNeck') if with_drloc else None,
                                 drloc if with_drloc else None)

    return build


register_with_without(
    't2t-vit-14-drloc',
    'T2T-ViT-14 with DRLoc (raw tokens of mmpretrain\'s T2T_ViT, 14x14 pooled to 7x7, m = 64; '
    'no trace) vs. mmpretrain\'s T2T-ViT-14 without it',
    _t2t_drloc, max_time_ratio=1.02)


def _compiled(builder: ModelBuilder) -> ModelBuilder:
    """``builder``'s model with its loss compiled as ``compile=True`` does in tools/train.py
    (:func:`mmvitreg.compat.compile_loss`, inductor; the optimizer step stays eager)."""

    def build(img_size: int, tiny: bool) -> nn.Module:
        from mmvitreg.compat import compile_loss
        return compile_loss(builder(img_size, tiny))

    return build


# measured on a CPU (1 thread, batch 8, 224x224, CPU clock, 2026-11-25): 1.034 (1937 vs 1874 ms), a miss;
# plain DeiT-S with CutMix compiled vs eager, timed the same way: 0.984. Not analysed yet; with TL-Align
# the attention runs through the ride's own autograd Function (one graph, no break), a likely place.
register_case(
    'deit-s-tlalign-compiled-vs-eager',
    TrainStepCase(
        description='DeiT-S with CutMix + TL-Align, its loss compiled by torch.compile (inductor, as '
        '`compile=True` in tools/train.py; compiled in the first two warm-up steps: mmpretrain\'s '
        'LabelSmoothLoss sets its num_classes on the first call, one recompile) vs. the same model eager',
        model=_compiled(_deit_cutmix(True)),
        baseline=_deit_cutmix(True),
        make_batch=classification_batch,
        max_time_ratio=1.0))
