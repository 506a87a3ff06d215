"""Side-by-side training-step benchmark: a model under test against its baseline, in one run.

A *case* is a config of the repository (``configs/``, or a config of mmpretrain that they inherit) with
``--cfg-options``-style overrides for each side: the model under test and its baseline, each built as
``tools/train.py`` builds a config's model. :data:`CASES` holds them by name and
``tools/analysis_tools/benchmark_train_step.py --case NAME`` runs them. A training step is mmengine's
``model.train_step(data, optim_wrapper)``: data preprocessing, forward, loss, backward and an AdamW step.

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

Add a case with :func:`register_case` (or :func:`register_with_without`, for a config with and without
its technique) at the end of this module: a config, the overrides of each side, the overrides of its tiny
variant and a target; the memory processes find cases by name when they import this module.
"""
import copy
import gc
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
from torch import nn

#: the folder that holds ``configs/``: the checkout, or ``mmvitreg/.mim`` of an installed wheel
ROOT = Path(__file__).resolve().parents[3]
ROLES = ('model', 'baseline')


def classification_batch(batch_size: int, img_size: int, num_classes: int) -> dict:
    """Random images (pixel values 0..255) and labels, as mmpretrain's ``ClsDataPreprocessor`` takes them."""
    from mmpretrain.structures import DataSample
    g = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, 256, (batch_size, 3, img_size, img_size), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, num_classes, (batch_size, ), generator=g)
    return dict(inputs=inputs, data_samples=[DataSample().set_gt_label(int(y)) for y in labels])


def token_label_batch(batch_size: int, img_size: int, num_classes: int, topk: int = 5, patch_size: int = 16,
                      map_size: int = 18) -> dict:
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


def segmentation_batch(batch_size: int, img_size: int, num_classes: int) -> dict:
    """Random images (pixel values 0..255) and per-pixel labels, as mmseg's ``SegDataPreProcessor`` takes them."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    g = torch.Generator().manual_seed(0)
    shape = (img_size, img_size)
    inputs, samples = [], []
    for _ in range(batch_size):
        inputs.append(torch.randint(0, 256, (3, *shape), generator=g, dtype=torch.uint8))
        sample = SegDataSample(metainfo=dict(img_shape=shape, pad_shape=shape, ori_shape=shape))
        sample.gt_sem_seg = PixelData(data=torch.randint(0, num_classes, (1, *shape), generator=g))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


# batch maker(batch_size, img_size, num_classes) -> the `data` dict a model's train_step takes
BatchMaker = Callable[[int, int, int], dict]


@dataclass(frozen=True)
class TrainStepCase:
    """One comparison of :mod:`studies.train_step_benchmark`: one config, two sides.

    Each side's config is ``config``, then ``both``, then the backbone's ``arch`` preset name replaced by the
    dict it names (the same model; overrides can then reach its numbers), then ``tiny`` (the tiny variant
    only), then the side's own overrides, then the backbone's ``img_size``. Overrides are ``{dotted key:
    value}``, merged as ``--cfg-options`` are (``_delete_=True`` replaces a dict).

    Args:
        description (str): What is compared with what, printed with the results.
        config (str): A config of the repository, relative to its ``configs/``
            (``'tlalign/deit-small_8xb128_cutmix-tlalign_in1k.py'``), or a config of a library that they
            inherit (``'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'``).
        model (dict): The overrides that make the model under test (often none: the config itself).
        baseline (dict): The overrides that make the baseline (e.g. ``{'model.target_transform': None}``).
        max_time_ratio (float): The target: median step time of the model over the baseline's.
        tiny (dict): The overrides of a toy version of both sides, for smoke tests (sizes only).
        both (dict): Overrides of both sides: what the config becomes in this case.
        batch (BatchMaker): ``(batch_size, img_size, num_classes) -> data`` for ``model.train_step``.
    """

    description: str
    config: str
    model: dict
    baseline: dict
    max_time_ratio: float
    tiny: dict
    both: dict = field(default_factory=dict)
    batch: BatchMaker = classification_batch

    def load(self, role: str, img_size: int, tiny: bool):
        """The mmengine ``Config`` of one side (see the class)."""
        from mmengine.config import Config
        from mmengine.hub import get_config
        if role not in ROLES:
            raise ValueError(f'unknown role {role!r}; choose from {ROLES}')
        cfg = get_config(self.config) if '::' in self.config else Config.fromfile(ROOT / 'configs' / self.config)
        cfg.merge_from_dict(copy.deepcopy(self.both))  # a deep copy: merging pops _delete_ from the values
        _arch_preset_as_dict(cfg)
        for overrides in ((self.tiny if tiny else {}), getattr(self, role), {'model.backbone.img_size': img_size}):
            cfg.merge_from_dict(copy.deepcopy(overrides))
        return cfg

    def build(self, role: str, img_size: int, tiny: bool) -> nn.Module:
        """One side's model as ``tools/train.py`` builds it: the config's ``data_preprocessor`` filled in as
        mmengine's Runner does, under the config's default scope, SyncBN layers reverted to BatchNorm (as the
        Runner does in a run of one process), ``model.loss`` compiled if the config says ``compile`` (as
        :mod:`mmvitreg.compat` does in the runner); weights as constructed."""
        from mmengine.model import revert_sync_batchnorm
        from mmengine.registry import MODELS, DefaultScope
        cfg = self.load(role, img_size, tiny)
        model_cfg = cfg.model.copy()
        model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            model = revert_sync_batchnorm(MODELS.build(model_cfg))
        if cfg.get('compile'):
            from mmvitreg.compat import compile_loss
            model = compile_loss(model, **({} if cfg.compile is True else dict(cfg.compile)))
        return model

    def make_batch(self, batch_size: int, img_size: int) -> dict:
        """A batch for both sides, with the classes of the model's head (a segmentor's decode head)."""
        model = self.load('model', img_size, False).model
        return self.batch(batch_size, img_size, (model.get('head') or model.decode_head).num_classes)

    def recipe(self) -> str:
        """The config and the overrides of each side, in one line."""
        sides = '; '.join(f'{role}: {getattr(self, role) or "the config"}' for role in ROLES)
        return f'{self.config}{f" with {self.both}" if self.both else ""}; {sides}'


def _arch_preset_as_dict(cfg) -> None:
    """Replace the name of the backbone's ``arch`` preset by the dict it names (the same model)."""
    from mmengine.registry import MODELS
    backbone = cfg.model.backbone
    if isinstance(backbone.get('arch'), str):
        with MODELS.switch_scope_and_registry(cfg.default_scope) as registry:
            zoo = registry.get(backbone.type).arch_zoo
        backbone.arch = copy.deepcopy(dict(zoo[backbone.arch.lower()]))


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


def register_with_without(name: str, description: str, config: str, without: dict, max_time_ratio: float,
                          tiny: dict, **options) -> None:
    """Add a case that times ``config`` (the model with its technique) against the same config with the
    ``without`` overrides (``options``: the other fields of :class:`TrainStepCase`)."""
    register_case(name, TrainStepCase(description, config, {}, without, max_time_ratio, tiny, **options))


# tiny variants (the tool's smoke test runs them at 32x32): 2-4 blocks of 32-64 channels, each model's
# layout kept; the heads and losses that read the backbone's width follow it
TINY_DEIT = {'model.backbone.arch': dict(embed_dims=48, num_layers=4, num_heads=3, feedforward_channels=192),
             'model.head.in_channels': 48}
TINY_SWIN = {'model.backbone': dict(arch=dict(embed_dims=32, depths=[2, 2], num_heads=[1, 2]), window_size=4,
                                    out_indices=(1, )),
             'model.head.in_channels': 64}
TINY_DEEPVIT = {'model.backbone.arch': dict(embed_dims=48, num_layers=4, num_heads=4, feedforward_channels=144),
                'model.head.in_channels': 48}

register_case(
    'deepvit-s-vs-msa',
    TrainStepCase(
        'DeepViT-S (re-attention in its last 5 blocks) vs. the same model with standard multi-head '
        'self-attention in every block',
        'deepvit/deepvit-s_8xb32_in1k.py', {}, {'model.backbone.arch.attn_types': 'msa'}, 1.10,
        {**TINY_DEEPVIT, 'model.backbone.arch': dict(TINY_DEEPVIT['model.backbone.arch'], stem=dict(channels=16),
                                                     attn_types=['msa', 'msa', 'reattn', 'reattn'])}))
register_case(
    'plain-vs-mmpretrain',
    TrainStepCase(
        'the plain ViT-16B preset of mmvitreg.DeepViT vs. mmpretrain\'s VisionTransformer with the same numbers '
        '(the preset\'s arch dict; the plain preset must keep >= 98% of its speed)',
        'deepvit/vit-16b_8xb32_in1k.py', {}, {'model.backbone.type': 'VisionTransformer'}, 1 / 0.98,
        {**TINY_DEEPVIT, 'model.backbone.arch': dict(TINY_DEEPVIT['model.backbone.arch'], attn_types='msa')}))

register_case(
    'lvvit-tl-vs-ce',
    TrainStepCase(
        'LV-ViT-S with token labeling (dense aux head, official weights) + MixToken vs. the same backbone trained '
        'with plain label-smoothed CE on the class token (mmpretrain\'s ImageClassifier and ViT head)',
        'lvvit/lvvit-s_8xb128_tl_in1k.py', {},
        {'model.type': 'ImageClassifier', 'model.backbone.out_type': 'cls_token', 'model.train_cfg': None,
         'model.head': dict(_delete_=True, type='VisionTransformerClsHead', num_classes=1000, in_channels=384,
                            loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'))},
        1.03, {'model.backbone.arch.num_layers': 2}, batch=token_label_batch))  # tiny: LV-ViT-S's width

register_case(
    'swin-vs-mmpretrain',
    TrainStepCase(
        'mmvitreg.SwinTransformer without a trace (fused window attention) vs. mmpretrain\'s SwinTransformer, '
        'Swin-T in mmpretrain\'s own recipe, same weights layout (must keep >= 98% of its speed)',
        'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py', {'model.backbone.type': 'mmvitreg.SwinTransformer'},
        {}, 1 / 0.98, TINY_SWIN))

TLALIGN_DEIT_S = 'tlalign/deit-small_8xb128_cutmix-tlalign_in1k.py'
register_with_without(
    'deit-s-tlalign-vs-cutmix', 'DeiT-S with CutMix + TL-Align (label weights propagated through all 12 attention '
    'maps) vs. the same model with the same token-aligned CutMix and the area target',
    TLALIGN_DEIT_S, {'model.target_transform': None}, 1.02, TINY_DEIT)
register_with_without(
    'swin-t-tlalign-vs-cutmix', 'Swin-T with Mixup/CutMix + TL-Align (label weights through every window '
    'attention, shift and merging) vs. the same model with the same Mixup/CutMix and the area target',
    'tlalign/swin-tiny_16xb64_cutmix-tlalign_in1k.py', {'model.target_transform': None}, 1.02, TINY_SWIN)
register_case(
    'deit-s-tlalign-weights-vs-labels',
    TrainStepCase(
        'DeiT-S with CutMix + TL-Align carrying the 2-dimensional (own, partner) label per token (in the fused '
        'attention\'s own kernel call) vs. the same carrying the official C = 1000 dimensional labels (their map '
        'formed beside the fused call)',
        TLALIGN_DEIT_S, {}, {'model.target_transform': dict(representation='labels', num_classes=1000)}, 1.0,
        TINY_DEIT))

register_with_without(
    'deit-s-diversepatch-vs-plain', 'DeiT-S with the patch-wise cosine, contrastive and mixing losses '
    '(DiversePatch, paper forms) vs. the same model with the same token-aligned CutMix and the plain loss',
    'diversepatch/deit-small12_4xb256-400e_diversepatch_in1k.py', {'model.aux_losses': []}, 1.03,
    {**TINY_DEIT, 'model.aux_losses.2.in_channels': 48})
# no Swin-T DiversePatch config (the paper fine-tunes Swin-B and -L): the Swin-B one with Swin-T's arch
register_with_without(
    'swin-t-diversepatch-vs-plain', 'Swin-T (the Swin-B config with Swin-T\'s arch) with the patch-wise cosine '
    'and mixing losses on the last stage (DiversePatch; no contrastive loss across down-sampling) vs. the same '
    'model with the same CutMix and the plain loss',
    'diversepatch/swin-base_8xb128-30e_diversepatch_in1k.py', {'model.aux_losses': []}, 1.03,
    {**TINY_SWIN, 'model.aux_losses.1.in_channels': 64, 'model.train_cfg.token_mix.patch_size': 8},
    both={'model.backbone.arch': 'tiny', 'model.head.in_channels': 768, 'model.aux_losses.1.in_channels': 768})

register_with_without(
    'swin-t-drloc', 'Swin-T with DRLoc (m = 64 pairs per image on the last stage\'s 7x7 grid, read through the '
    'trace; MLP 2x768 -> 512 -> 512 -> 2) vs. the same model without it',
    'drloc/swin-t_drloc_8xb128-100e_imagenet100.py', {'model.aux_losses': []}, 1.02,
    {**TINY_SWIN, 'model.aux_losses.0.in_channels': 64})
register_with_without(
    't2t-vit-14-drloc', 'T2T-ViT-14 with DRLoc (raw tokens of mmpretrain\'s T2T_ViT, 14x14 pooled to 7x7, '
    'm = 64; no trace) vs. the same model without it',
    'drloc/t2t-vit-14_drloc_8xb128-100e_imagenet100.py', {'model.aux_losses': []}, 1.02,
    {'model.backbone': dict(embed_dims=64, num_layers=2, layer_cfgs=dict(num_heads=2, feedforward_channels=192)),
     'model.head.in_channels': 64, 'model.aux_losses.0': dict(in_channels=64, num_pairs=4, grid_pool=None)})

# measured on a CPU (1 thread, batch 8, 224x224, CPU clock, 2026-11-25): 1.034 (1937 vs 1874 ms), a miss;
# plain DeiT-S with CutMix compiled vs eager, timed the same way: 0.984. Not analysed yet; with TL-Align
# the attention runs through the ride's own autograd Function (one graph, no break), a likely place.
register_case(
    'deit-s-tlalign-compiled-vs-eager',
    TrainStepCase(
        'DeiT-S with CutMix + TL-Align, its loss compiled by torch.compile (inductor, as `compile=True` in '
        'tools/train.py; compiled in the first two warm-up steps: mmpretrain\'s LabelSmoothLoss sets its '
        'num_classes on the first call, one recompile) vs. the same model eager',
        TLALIGN_DEIT_S, {'compile': True}, {}, 1.0, TINY_DEIT))

# the token losses in segmentation training (issue 24): mmseg's UperNet Swin-T recipe as mmvitreg.TokenSegmentor,
# with the loss vs. the same model without it (TokenSegmentor without users runs mmseg's EncoderDecoder step);
# measure at --img-size 512 --batch-size 2 (the recipe's crop and images per GPU). Tiny variant: four one-block
# stages with 2-pixel patches, so that a 32x32 image still leaves the last stage a 2x2 grid
TINY_UPERNET_SWIN = {
    'model.backbone': dict(arch=dict(embed_dims=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2]), patch_size=2,
                           window_size=4),
    'model.data_preprocessor.size': (32, 32),
    'model.decode_head': dict(in_channels=[16, 32, 64, 128], channels=32),
    'model.auxiliary_head': dict(in_channels=64, channels=16),
}
register_with_without(
    'upernet-swin-t-drloc', 'UperNet Swin-T (mmseg\'s ADE20K recipe) with DRLoc (m = 64 pairs per image on the last '
    'stage\'s grid, 16x16 at 512x512, read through the trace; MLP 2x768 -> 512 -> 512 -> 2) vs. the same segmentor '
    'without it', 'drloc/upernet_swin-t_drloc_8xb2-160k_ade20k-512x512.py', {'model.aux_losses': []}, 1.03,
    {**TINY_UPERNET_SWIN, 'model.aux_losses.0.in_channels': 128}, batch=segmentation_batch)
register_with_without(
    'upernet-swin-t-patch-cos', 'UperNet Swin-T (mmseg\'s ADE20K recipe) with DiversePatch\'s patch-wise cosine loss '
    '(the last stage\'s 16x16 tokens at 512x512, read through the trace) vs. the same segmentor without it',
    'diversepatch/upernet_swin-t_patch-cos_8xb2-160k_ade20k-512x512.py', {'model.aux_losses': []}, 1.03,
    TINY_UPERNET_SWIN, batch=segmentation_batch)
