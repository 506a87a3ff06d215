"""The catalogue of what can go wrong in a run, the message each case stops with, and what to do.

    python troubleshooting.py [CASE ...]    # the cases named (their ids), or every case, as text

The installed package holds this file (``mmvitreg/.mim/tools/misc/troubleshooting.py``), so messages that stop a run
point here (:func:`mmvitreg.mmcv_ops.troubleshooting`): a wheel holds no ``docs/``.

Every case is a test (``tests/test_bad_inputs.py`` runs it and checks that the message appears and
that nothing was written or lost) and a section of ``docs/troubleshooting.md``, which
``python tools/misc/gen_troubleshooting.py`` generates from :data:`CASES` (a test keeps the committed
file up to date). Add a case here, then its scenario to the test; the two lists must match.
"""

import argparse
from dataclasses import dataclass
from typing import List


@dataclass(frozen=True)
class Case:
    """One way a run can go wrong.

    Attributes:
        id (str): Short name; the scenario of the same name in ``tests/test_bad_inputs.py``.
        stage (str): Where it is caught: ``install``, ``config``, ``model``, ``data``, ``checkpoint``,
            ``train`` or ``tools``.
        what (str): What the user did.
        message (str): The fixed part of what the run prints (the test looks for it verbatim).
        fix (str): What to do.
    """

    id: str
    stage: str
    what: str
    message: str
    fix: str


#: where the installed package keeps its tools, as a shell expression (an installed wheel has no docs/ nor tools/)
INSTALLED_MIM = '$(python -c "import mmvitreg, os; print(os.path.dirname(mmvitreg.__file__))")/.mim'

CASES: List[Case] = [
    # ---- install
    Case(
        'extra-missing',
        'install',
        'an mmseg or mmdet config where mmsegmentation / mmdet is not installed (a classification install)',
        'is a config of mmseg, which is not installed',
        "Install the extra from mmvitreg's checkout (mmvitreg is not on PyPI): "
        '`pip install "/path/to/mmvitreg[seg]"` (`pip install ".[seg]"` inside it; `[det]` for an mmdet config, '
        '`[all]` for both). Nothing is compiled: mmcv-lite comes with it where no mmcv is installed, and mmvitreg '
        'serves the compiled ops its configs call.',
    ),
    Case(
        'pkg-resources-missing',
        'install',
        'a config with an `mmpretrain::` (`mmseg::`, `mmdet::`) base where setuptools >= 82 left out `pkg_resources`',
        "No module named 'pkg_resources'",
        'mmengine 0.10 finds the library of such a base through `pkg_resources` (fixed on its main branch '
        'only, PR #1676): `pip install "setuptools<82"`, which mmvitreg asks for (installing mmvitreg from its '
        'checkout brings it back).',
    ),
    Case(
        'op-not-served',
        'install',
        "an mmcv op that needs mmcv's compiled ops on mmcv-lite, where mmvitreg serves "
        'only the ops its configs call (`nms`, `roi_align_forward`, `roi_align_backward`)',
        "is not provided by mmvitreg's stand-in for mmcv's compiled ops",
        "No mmvitreg config calls such an op. To use it, build mmcv's compiled ops into this environment with the "
        'command the message prints (a C++ compiler; about 20 minutes on 2 cores). On a torch whose headers need '
        "C++20 (2.10 and newer), mmcv 2.1.0's `setup.py` still passes `-std=c++17`: build through a compiler "
        'wrapper that rewrites the flag, as `make_compiler_wrappers` in `tools/setup_env.sh` does (the installed '
        f'package holds it: `{INSTALLED_MIM}/tools/setup_env.sh`; `bash tools/setup_env.sh --with-ops` in the '
        'checkout builds such an environment of its own).',
    ),
    Case(
        'mmcv-ext-missing',
        'install',
        "on mmcv-lite, mmseg's or mmdet's own tools (or a script that imports "
        "`mmcv.ops`, `mmseg.models` or `mmdet.models` before mmvitreg) where mmvitreg's startup hook does not run",
        "No module named 'mmcv._ext'",
        "mmvitreg serves `mmcv._ext` from torchvision's kernels; installed with pip (`pip install "
        '"/path/to/mmvitreg[seg]"`, or `pip install -e`), it does so from interpreter start, through the '
        '`_mmvitreg_mmcv_ext.pth` file the install puts in site-packages. That file does not run where mmvitreg '
        'is only on `PYTHONPATH`, was installed with `pip install --target`, or under `python -S`: there, '
        "install it with pip, or import mmvitreg first (`import mmvitreg` in a script; in a config, "
        "`custom_imports = dict(imports=['mmvitreg'], allow_failed_imports=False)`).",
    ),
    Case(
        'host-imported-first',
        'install',
        "on mmcv-lite, mmpretrain's or mmcv's models imported before mmvitreg in "
        "a script of one's own, then mmdet's or mmseg's models",
        "cannot import name 'MultiScaleDeformableAttention'",
        "`import mmvitreg` first, as mmvitreg's tools and `mim train mmvitreg` do: mmcv's transformer bricks look "
        "for mmcv's ops once, when first imported, and on mmcv-lite mmvitreg serves them from then on (installed "
        "with pip, from interpreter start: see `No module named 'mmcv._ext'`).",
    ),
    # ---- config
    Case(
        'config-missing',
        'config',
        'a config path that does not exist (typo, wrong working directory)',
        'config file not found',
        'Check the path; relative paths are read from the working directory the message names.',
    ),
    Case(
        'config-scope',
        'config',
        'a config that inherits no mmpretrain / mmseg / mmdet runtime',
        'mmvitreg tools serve configs of mmpretrain, mmseg, mmdet',
        "Inherit one of their `default_runtime.py` (e.g. `_base_ = 'mmpretrain::_base_/default_runtime.py'`).",
    ),
    Case(
        'component-misspelled',
        'config',
        "a misspelled mmvitreg component (`type='mmvitreg.DeepVit'`)",
        "unknown component type 'mmvitreg.DeepVit' at cfg.model.backbone. Did you mean mmvitreg.DeepViT?",
        'Use the suggested name; the message lists every component mmvitreg provides.',
    ),
    Case(
        'arch-unknown',
        'model',
        "an arch preset that does not exist (`arch='xs'`)",
        'Arch xs is not in default archs',
        'Pick one of the listed presets, or give `arch` as a dict of `embed_dims`, `num_layers`, `num_heads`, '
        '`feedforward_channels`.',
    ),
    Case(
        'option-invalid',
        'model',
        "an option outside its allowed set (`out_type='patch'`)",
        'Unsupported `out_type` patch, please choose from',
        'Use one of the listed values.',
    ),
    Case(
        'amp-float16-cpu',
        'tools',
        '`--amp --amp-dtype float16` on a machine without a GPU',
        '--amp-dtype float16 needs a GPU; on a CPU --amp trains in bfloat16',
        'Drop `--amp-dtype` (CPU autocast uses bfloat16) or train on a GPU.',
    ),
    # ---- data
    Case(
        'data-root-missing',
        'data',
        'a data root that does not exist',
        'does not exist',
        "Build the data set the config reads, or point `--cfg-options <key>=<folder>` (the key the message "
        "names) at yours. The digits sets of mmvitreg's configs come from the builder the installed package "
        f'holds: `python {INSTALLED_MIM}/tools/dataset_converters/digits.py LAYOUT --out data` (in the '
        'checkout: '
        '`python tools/dataset_converters/digits.py LAYOUT --out data`), run in the folder you train from, with '
        'LAYOUT `imagenet` for a classification config (`data/digits_imagenet`), `ade20k` or `cityscapes` for a '
        'segmentation one (`data/digits_ade20k`, `data/digits_cityscapes`), `coco` for a detection one '
        '(`data/digits_coco`), or `all`.',
    ),
    Case(
        'data-root-empty',
        'data',
        'a data root whose annotation file lists no images',
        'holds no images',
        'Fill the annotation file (one `<image> <label>` line per image) or rebuild the data set.',
    ),
    Case(
        'image-corrupt',
        'data',
        'a training image that is not a readable image file',
        'failed to load image',
        'The message names the file: replace or delete it (and its annotation line).',
    ),
    Case(
        'label-maps-not-configured',
        'data',
        'token labeling (`beta > 0`) on data without label maps',
        "TokenLabelHead needs 'token_label' in the data samples",
        'Add `mmvitreg.LoadTokenLabelMap` ... `mmvitreg.TokenLabelTarget` to the training pipeline, or set '
        '`beta=0` for plain data.',
    ),
    Case(
        'label-map-missing',
        'data',
        'an image with no label map under `label_root`',
        'does not exist; generate the maps with tools/generate_label_maps.py',
        'Generate the maps for every training image (`tools/generate_label_maps.py`) and check `label_root` / '
        '`img_prefix`: the map of `<img_prefix>/<class>/<image>.JPEG` is `<label_root>/<class>/<image>.npy` (what '
        'the generator writes) or, where there is none, `<label_root>/<class>/<image>.pt` (the official maps).',
    ),
    Case(
        'label-map-shape',
        'data',
        'a label map that is not a `(2, k, H, W)` array',
        'malformed token label map',
        'The message names the file and what is wrong (shape, dtype, NaN or infinite values, class indices that are '
        'not integers); regenerate it with `tools/generate_label_maps.py`, which rewrites every invalid one.',
    ),
    Case(
        'label-map-classes',
        'data',
        'label maps of a teacher with more classes than the model',
        'are out of range for num_classes=10',
        'Use maps made for this data set (the teacher must predict the same classes); '
        '`LoadTokenLabelMap(num_classes=...)` checks every map.',
    ),
    Case(
        'label-map-bounds',
        'data',
        'a crafted `.pt` label map whose size, stride or offset reach past its storage, or that reads one storage '
        'with two dtypes (read in a DataLoader worker)',
        'torch.load(weights_only=True) refused it',
        'The message names the file (also from a worker) and torch\'s reason: nothing past the stored values was '
        'read, nothing of the pickle ran. Regenerate the map with `tools/generate_label_maps.py`, which rewrites '
        'every invalid one. A FIFO, a device or a symlink to one under a map\'s name is refused before it is read '
        '(`is not a regular file`), and so is a file larger or smaller than its shape allows (`holds N bytes, '
        'outside`; `LoadTokenLabelMap(map_shape=(k, H, W))` sets the bound, 16 MiB without it).',
    ),
    Case(
        'label-map-compressed',
        'data',
        'a label map with a compressed member (a zip bomb: 1 MB inflating to 1 GiB)',
        'is compressed, which torch.save never does',
        'Nothing was inflated. The message names the file: regenerate it with `tools/generate_label_maps.py`.',
    ),
    Case(
        'label-map-store-classes',
        'data',
        'a packed label-map store whose maps fail the value check (class '
        'indices out of range or not integers, NaN or infinite logits)',
        "maps.npy['",
        'The message names the store, the map\'s key and the image: pack it again from valid maps '
        '(`tools/dataset_converters/pack_label_maps.py`); every map is checked as it is read, as from a file.',
    ),
    Case(
        'label-map-grid',
        'data',
        '`TokenLabelTarget.token_label_size` that is not the backbone\'s token grid',
        'token_label must be (2, k, S, S) per sample with (S, S) the token grid',
        'Set `token_label_size = img_size // patch_size`.',
    ),
    # ---- model composition
    Case(
        'mixtoken-patch-size',
        'model',
        "a mix's `patch_size` that is not the backbone's token stride (MixToken, or the plan TL-Align starts from)",
        'draws its plan on 8-pixel patches but SwinTransformer embeds 4-pixel patches',
        "Set the mix's `patch_size` to the backbone's token stride, as the message says (checked when the model is "
        "built, before the run starts).",
    ),
    Case(
        'mixtoken-backbone',
        'model',
        'MixToken on a backbone that takes no token trace (mmpretrain ResNet)',
        'MixToken needs a backbone that takes a token trace',
        'Use an mmvitreg backbone (VisionTransformer, DeepViT, LVViT, SwinTransformer) or image-level CutMix.',
    ),
    Case(
        'trace-user-backbone',
        'model',
        'a trace user needing a capability the backbone lacks (TokenLabelHead on Swin)',
        "TokenLabelHead needs the fact ['cls_token']",
        'Pick a backbone that serves it: `python tools/analysis_tools/trace_support.py --user NAME` shows which do '
        '(`tools/train.py` and `tools/test.py` stop with this one line before the run starts).',
    ),
    Case(
        'tap-missing-block',
        'model',
        'a trace user tapping a block the backbone does not have',
        'taps the tokens of a block that',
        'Tap an existing block (negative indices count from the last).',
    ),
    Case(
        'tap-untraced-block',
        'model',
        'a trace user tapping a block the backbone does not trace (CvT block 0)',
        'but CvT traces only blocks',
        'Tap one of the blocks the message names (CvT traces its last stage, whose tokens have a cls token).',
    ),
    Case(
        'head-out-type',
        'model',
        "a head reading every token on a backbone built with another `out_type` "
        '(TokenLabelHead on a ViT with its default `cls_token` output)',
        "set the backbone's out_type='raw'",
        "Set `backbone.out_type='raw'` (LV-ViT configs do); a backbone that cannot give every token (CvT, Swin) "
        'is refused with the formats it has.',
    ),
    Case(
        'drloc-in-channels',
        'model',
        'a DRLoc `in_channels` that is not the width of the block it taps',
        'channels in the tokens of blocks',
        'Set `in_channels` to the widths the message names (a Swin stage doubles its width; a ViT keeps `embed_dims`).',
    ),
    Case(
        'image-target-dense',
        'model',
        'a user that needs an image-level target (TL-Align, MixToken, TokenLabelHead, '
        'PatchMixingLoss) in a segmentor or detector',
        'trains with an image-level target',
        'Keep it for classification; in dense training use DRLoc, PatchCosineLoss, PatchContrastiveLoss or '
        'AttentionCosineLoss.',
    ),
    Case(
        'two-target-transforms',
        'model',
        'two target transforms in one model',
        'a model takes at most one target transform',
        'Keep one: each replaces the training target.',
    ),
    # ---- checkpoints
    Case(
        'checkpoint-missing',
        'checkpoint',
        '`tools/test.py` with a checkpoint path that does not exist',
        'does not exist',
        'Check the path (the work dir\'s `last_checkpoint` names the newest).',
    ),
    Case(
        'checkpoint-empty',
        'checkpoint',
        'an empty checkpoint file (a copy that failed, a full disk)',
        'empty file (0 bytes)',
        'Use another checkpoint; mmvitreg itself never leaves one (it writes to a temporary file first).',
    ),
    Case(
        'checkpoint-truncated',
        'checkpoint',
        'a truncated checkpoint (a save killed by another tool)',
        'not a readable PyTorch checkpoint',
        'Use the previous checkpoint; `--resume` without a file does so by itself.',
    ),
    Case(
        'checkpoint-not-a-checkpoint',
        'checkpoint',
        'a file that is not a checkpoint (a list, a log)',
        'not a checkpoint',
        'Point at the `.pth` file the training wrote.',
    ),
    Case(
        'checkpoint-not-a-file',
        'checkpoint',
        'a folder (the work_dir instead of its `.pth`), a FIFO or a device given as the checkpoint',
        'is not a regular file',
        'Give the checkpoint file itself: `<work_dir>/epoch_N.pth`, or the path written in '
        '`<work_dir>/last_checkpoint`. Nothing is read from anything but a regular file, so a pipe cannot hang '
        'the run.',
    ),
    Case(
        'checkpoint-odd-tensor',
        'checkpoint',
        'a checkpoint holding quantized, sparse or float8 tensors (an export for inference, not training weights)',
        'not a weight a model loads',
        'Use the float checkpoint the export was made from: a model loads dense weights of a float, complex, '
        'integer or bool dtype.',
    ),
    Case(
        'checkpoint-unsafe-pickle',
        'checkpoint',
        'a checkpoint whose pickle names a global outside the allow-list (an object that would run code on load)',
        "is not on mmvitreg's allow-list of what checkpoints hold",
        'Nothing of it ran. The message names the global: checkpoints of mmvitreg / mmengine and the official '
        'releases never need it, so get the file from its source again; only if you trust it, pass '
        '`--unsafe-load` (`tools/train.py`, `tools/test.py`, the converters) or set `MMVITREG_UNSAFE_LOAD=1`.',
    ),
    Case(
        'checkpoint-other-model',
        'checkpoint',
        '`tools/test.py` with a checkpoint of another model',
        'does not fit the model',
        'Use the checkpoint of this config; `--allow-partial` evaluates the keys that fit (the message counts them).',
    ),
    Case(
        'resume-other-model',
        'checkpoint',
        '`--resume` from a checkpoint of another config',
        'resume needs a checkpoint of this very config',
        'Resume the run the checkpoint belongs to; to start from its weights use `load_from` (with '
        '`--allow-partial` if it is another architecture).',
    ),
    Case(
        'resume-unreadable-newest',
        'checkpoint',
        '`--resume` when the newest checkpoint is unreadable',
        '--resume auto: skipping',
        'Nothing: the run resumes from the previous checkpoint (the warning names the skipped file).',
    ),
    Case(
        'resume-not-resumable',
        'checkpoint',
        "`--resume` from a file without the optimizer's or the schedulers' "
        "state (mmengine's `best_*.pth`, a checkpoint saved with `save_optimizer=False`)",
        'so the optimizer and the schedulers would start afresh',
        'Resume from the file the message names (the newest of its folder or work dir that holds them), or start a '
        'new training from its weights with `load_from`.',
    ),
    Case(
        'resume-beyond-max-epochs',
        'checkpoint',
        '`--resume` from a checkpoint that has trained more epochs '
        '(iterations) than `train_cfg.max_epochs` (`max_iters`)',
        'so nothing would train',
        'Set `train_cfg.max_epochs` above the epochs done to train on, or evaluate the checkpoint with '
        '`tools/test.py`. At exactly `max_epochs` the run warns that nothing trains and exits 0.',
    ),
    Case(
        'checkpoint-non-finite',
        'checkpoint',
        '`tools/test.py`, an inferencer, `load_from` or `--resume` with a '
        'checkpoint whose weights hold NaN or infinity',
        'holds NaN or infinite values',
        'The message names the first such tensor: the training had diverged when the file was saved. Use an earlier '
        'checkpoint (`tools/train.py` never writes such a file); there is no opt-out.',
    ),
    Case(
        'resume-state-mismatch',
        'checkpoint',
        '`--resume` with a config the resumed state cannot follow (another '
        'scheduler or optimizer type, `paramwise_cfg` removed, a new epoch length during the warm-up)',
        'the resumed state does not fit the new config',
        "The message lists what does not fit: resume with the checkpoint's settings for those, or start a new "
        'training from its weights with `load_from`.',
    ),
    Case(
        'ema-copy-empty',
        'checkpoint',
        'an EMA hook whose copy loads none of the checkpoint\'s tensors (a broken hook), even with `--allow-partial`',
        'loaded none of its tensors into its EMA copy',
        "Use a checkpoint of this config, or drop the hook (`--cfg-options custom_hooks=[]`) to test the model's own "
        'weights.',
    ),
    Case(
        'ema-unpaired',
        'checkpoint',
        'a checkpoint whose `ema_state_dict` holds a weight its `state_dict` lacks (an '
        'edited file) with an EMA hook in the config',
        'which EMAHook cannot pair',
        'Use a checkpoint an EMA hook saved, or drop the hook (`--cfg-options custom_hooks=[]`).',
    ),
    Case(
        'load-from-other-model',
        'checkpoint',
        '`load_from` a checkpoint that would leave the backbone random (another architecture, an official release '
        'of another model, no key matching)',
        'backbone tensors (at least 90% needed',
        'The message names the layout the file looks like: use a config of that architecture (official LV-ViT, '
        'DeepViT, DiversePatch, DeiT and Swin releases load directly) or `--allow-partial` to load the keys that '
        'fit.',
    ),
    Case(
        'load-from-unexpected-layers',
        'checkpoint',
        '`load_from` a checkpoint with parameters the model has no place for (a talking-heads DiversePatch release '
        'in a DeiT config without talking heads)',
        'parameters the model TokenClassifier has no place for',
        'The message names the parameters and the config that takes them (talking heads: '
        "`attn_types='talking_heads'`, e.g. `deit-base12-talking-heads_...py`): use it; `--allow-partial` loads "
        'the rest without them (the model then does not compute what was trained).',
    ),
    Case(
        'checkpoint-remote-unreadable',
        'checkpoint',
        'a checkpoint URL whose scheme no mmengine file backend reads (or that cannot be fetched)',
        "cannot be fetched through mmengine's file backends",
        'Download the file and give its local path, or install the backend of that scheme (`https://`, '
        '`s3://`, ... are read through `mmengine.fileio`, then by the same allow-listed reader as local files).',
    ),
    Case(
        'official-checkpoint-unconvertible',
        'checkpoint',
        'an official release with keys its converter does not know (a distilled DeiT: `dist_token`, `head_dist`)',
        'release layout but does not convert',
        'The message lists the keys with no mmvitreg counterpart: use the release the config is made for, or '
        'drop those keys and load the rest (`tools/model_converters/*_to_mmvitreg.py` shows the renaming).',
    ),
    Case(
        'converter-other-model',
        'tools',
        'a converter given the state dict of another model',
        'keys with no mmvitreg counterpart',
        'Use the converter of the checkpoint\'s model (`tools/model_converters/*_to_mmvitreg.py`).',
    ),
    Case(
        'converter-unsafe-pickle',
        'tools',
        'a converter given a checkpoint whose pickle names a global outside the allow-list',
        "error: checkpoint",
        'The converters read through the loader of every tool: one `error:` line names the file and the global; '
        'only for a file you trust, pass `--unsafe-load`.',
    ),
    Case(
        'export-checkpoint-other-model',
        'tools',
        '`tools/deployment/pytorch2onnx.py` with a checkpoint of another model',
        'does not fit the model',
        'Export with the checkpoint of this config (official releases are converted on load, as in `tools/test.py`).',
    ),
    # ---- training
    Case(
        'nan-loss',
        'train',
        'a loss that becomes NaN or infinite (lr too high, broken data)',
        'non-finite loss at iteration',
        'The message names the iteration, the loss term and the last checkpoint with finite weights: lower the lr, '
        'add `optim_wrapper.clip_grad`, or check that batch\'s data; resume from that checkpoint.',
    ),
    Case(
        'nan-weights',
        'train',
        'a step with a finite loss that leaves the weights NaN or infinite (lr far too high)',
        'non-finite weights after iteration',
        'Nothing was written: the message names the first non-finite tensor and the last checkpoint with finite '
        'weights (mmengine\'s `max_keep_ckpts` did not remove it). Lower the lr or add `optim_wrapper.clip_grad`, '
        'and resume from that checkpoint.',
    ),
]


def render_markdown(cases: List[Case] = CASES) -> str:
    """``docs/troubleshooting.md``: one section per stage, one entry per case."""
    stages = dict(
        install='Installing',
        config='Configs',
        tools='Tool options',
        model='Building the model',
        data='Data',
        checkpoint='Checkpoints',
        train='Training',
    )
    lines = [
        '# Troubleshooting',
        '',
        '<!-- generated from tools/misc/troubleshooting.py by tools/misc/gen_troubleshooting.py; do not edit -->',
        '',
        f'Every way a run can go wrong that mmvitreg knows of ({len(cases)} cases) stops at once with a message '
        'that says what and where, and writes nothing. Each case is a test (`tests/test_bad_inputs.py`).',
        '',
    ]
    for stage, title in stages.items():
        group = [c for c in cases if c.stage == stage]
        if not group:
            continue
        lines += [f'## {title}', '']
        for case in group:
            shown = f'`` {case.message} ``' if '`' in case.message else f'`{case.message}`'  # a code span
            lines += [
                f'### {case.what[0].upper()}{case.what[1:]}',
                '',
                f'You see: {shown}',
                '',
                f'What to do: {case.fix}',
                '',
            ]
    return '\n'.join(lines)  # ends in one newline (the last entry's blank line)


def render_text(case: Case) -> str:
    """One case as the command line prints it."""
    return f'{case.id}: {case.what}\n  you see: {case.message}\n  what to do: {case.fix}'


def main(argv=None):
    parser = argparse.ArgumentParser(description='print cases of the troubleshooting catalogue')
    parser.add_argument('cases', nargs='*', metavar='CASE', help='ids of the cases to print (default: all)')
    wanted = parser.parse_args(argv).cases
    unknown = sorted(set(wanted) - {c.id for c in CASES})
    if unknown:
        parser.error(f"no case {', '.join(unknown)}; the cases: {', '.join(c.id for c in CASES)}")
    print('\n\n'.join(render_text(c) for c in CASES if not wanted or c.id in wanted))


if __name__ == '__main__':
    main()
