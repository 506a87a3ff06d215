"""Annotate a data set with dense label maps for token labeling (ReLabel-style machine annotation).

    python tools/generate_label_maps.py CONFIG CHECKPOINT LABEL_ROOT [--split train] [--img-size 224]
        [--region full|center_square] [--topk 5] [--batch-size 32] [--num-workers 4]
        [--allow-partial] [--cfg-options k=v ...] [--launcher none|pytorch|slurm]

Token labeling (`Jiang et al. 2021 <https://arxiv.org/abs/2104.10858>`_, §4.1 "Re-labeling", after
`ReLabel <https://arxiv.org/abs/2101.05022>`_): a trained classifier (the teacher; the paper uses
NFNet-F6 at 576 px) is applied to every position of its final feature map instead of to the pooled
feature, giving a dense ``K``-class score map per image:

* mmvitreg ``TokenLabelHead`` (a head with ``aux_head``): ``aux_head`` on every patch token;
* ViT-like backbones with ``out_type`` (mmpretrain ``VisionTransformer`` and its kin): the backbone is
  switched to ``out_type='featmap'`` and the whole classification head is applied to every patch
  token (after ``ln2`` for ``avg_featmap`` models, as the pooled feature would be);
* CNNs and Swin (a ``GlobalAveragePooling`` neck): the head's linear layer acts as a 1x1 convolution
  on the final feature map, the neck is skipped.

Each image is resized to ``--img-size`` squared (``--region full``: the map covers the whole image)
or short-side resized and centre-cropped (``--region center_square``, the official generator's
view); the top-``k`` logits and class indices of every map cell are saved as a ``(2, k, H, W)``
float16 array at ``LABEL_ROOT/<image path relative to the data prefix, suffix .npy>`` (numpy's format, read without
pickle: :mod:`mmvitreg.datasets.label_maps`). Files are written atomically and existing ones are skipped once they
read as valid maps of ``--topk`` classes within the teacher's ``num_classes`` (a truncated, foreign or refused
file, or a FIFO or device under its name, is written again, and counted), so an interrupted run resumes where it
stopped. The teacher loads strictly: a checkpoint that leaves any of its parameters (a head) at their initial
values stops the run with one line (``--allow-partial`` takes what fits). With ``--launcher pytorch|slurm`` every
rank annotates its own shard. Pack the finished folder into a memory-mapped store for training
(``tools/dataset_converters/pack_label_maps.py``: 3-4x cheaper to load). The last line
reports how often the pooled map's top class agrees with the ground truth (a check of the teacher
and of the loaded checkpoint).

Official-equivalent call (TokenLabeling ``generate_label.py --img-size 576 --crop-pct 1.0``: short
side to 576, centre 576 x 576 square, top-5), here with a teacher from mmpretrain's model zoo
(EfficientNetV2-L, 86.31%; the official NFNet-F6 is not in the zoo), 18 x 18 maps like the official
ones; train on them with ``LoadTokenLabelMap(region='center_square')`` (configs/lvvit/README.md)::

    python tools/generate_label_maps.py configs/lvvit/efficientnetv2-l_label-maps_in1k-576px.py \
        efficientnetv2-l_in21k-pre-3rdparty_in1k_20221220-63df0efd.pth data/imagenet/label_maps_effv2l \
        --img-size 576 --region center_square --topk 5
"""

import argparse
import os
import sys

import torch

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.datasets.label_maps import REGIONS, LabelMapError, label_map_path, load_label_map, save_label_map
from mmvitreg.utils import PARTIAL_HINT, ConfigError, init_dist, load_config, parse_tool_args


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Generate dense label maps with a classifier')
    parser.add_argument('config', help='mmpretrain classifier config')
    parser.add_argument('checkpoint', help='checkpoint of the classifier')
    parser.add_argument('label_root', help='folder to write the maps to')
    parser.add_argument(
        '--split',
        choices=['train', 'val', 'test'],
        default='train',
        help='which dataloader of the config to annotate (default: train)',
    )
    parser.add_argument('--img-size', type=int, default=224, help='teacher input size (default: 224)')
    parser.add_argument(
        '--region',
        choices=REGIONS,
        default='full',
        help='full: resize the whole image; center_square: short side + centre crop',
    )
    parser.add_argument('--topk', type=int, default=5, help='classes stored per map cell (default: 5)')
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--num-workers', type=int, default=4)
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='annotate although the checkpoint leaves some of the teacher\'s parameters (e.g. its '
        'head) at their initial values (default: every parameter must load)',
    )
    return parse_tool_args(parser, argv)


class DenseAnnotator(torch.nn.Module):
    """A classifier applied to every position of its final feature map.

    Args:
        classifier (ImageClassifier): An mmpretrain-style classifier (``backbone``, ``neck``,
            ``head``).

    Returns (forward):
        Tensor: ``(B, H, W, K)`` logits of every map cell for inputs ``(B, 3, h, w)``.
    """

    def __init__(self, classifier):
        super().__init__()
        from mmpretrain.models.necks import GlobalAveragePooling

        self.backbone = classifier.backbone
        neck = getattr(classifier, 'neck', None)
        if neck is not None and not isinstance(neck, GlobalAveragePooling):
            raise ConfigError(
                f'cannot annotate with neck {type(neck).__name__}: the head must see one '
                'feature vector per position (no neck or GlobalAveragePooling)'
            )
        self.token_norm = None
        if hasattr(self.backbone, 'out_type'):
            if self.backbone.out_type == 'avg_featmap':
                self.token_norm = self.backbone.ln2
            self.backbone.out_type = 'featmap'
        head = classifier.head
        self.classify = head.aux_head if hasattr(head, 'aux_head') else (lambda feats: head((feats,)))

    def forward(self, inputs):
        feats = self.backbone(inputs)
        feats = feats[-1] if isinstance(feats, (tuple, list)) else feats
        if feats.dim() != 4:
            raise ConfigError(f'the backbone gives {tuple(feats.shape)}, not a (B, C, H, W) feature map')
        b, c, h, w = feats.shape
        tokens = feats.permute(0, 2, 3, 1).reshape(-1, c)
        if self.token_norm is not None:
            tokens = self.token_norm(tokens)
        return self.classify(tokens).reshape(b, h, w, -1)


def existing_map_problem(path, topk, num_classes):
    """Why the map at ``path`` must be written (again), or None to skip it: it is missing, does not read as a
    valid map (truncated by a killed copy, a FIFO, another format: :func:`load_label_map`, the reader training
    uses, whose refusals name the file), holds another top-k, or class indices outside the teacher's
    ``num_classes``."""
    if not os.path.lexists(path):
        return 'missing'
    try:
        label_map = load_label_map(path, num_classes)
    except (OSError, LabelMapError) as e:
        return str(e)
    return None if label_map.shape[1] == topk else f'{path} holds a top-{label_map.shape[1]}, not --topk {topk}'


def _annotation_pipeline(dataset_cfg, img_size, region):
    load = next(
        (t for t in dataset_cfg.get('pipeline', []) if t['type'].endswith('LoadImageFromFile')),
        dict(type='LoadImageFromFile'),
    )
    if region == 'full':
        resize = [dict(type='Resize', scale=(img_size, img_size), keep_ratio=False, interpolation='bicubic')]
    else:
        resize = [
            dict(type='ResizeEdge', scale=img_size, edge='short', interpolation='bicubic'),
            dict(type='CenterCrop', crop_size=img_size),
        ]
    return [load, *resize, dict(type='PackInputs')]


def build_dataset(cfg, split, img_size, region):
    from mmpretrain.registry import DATASETS

    key = f'{split}_dataloader'
    if cfg.get(key) is None:
        raise ConfigError(f'the config has no {key}')
    dataset_cfg = cfg[key].dataset
    while 'dataset' in dataset_cfg:  # dataset wrappers (RepeatDataset, ...)
        dataset_cfg = dataset_cfg.dataset
    dataset_cfg = dataset_cfg.copy()
    dataset_cfg.pipeline = _annotation_pipeline(dataset_cfg, img_size, region)
    return DATASETS.build(dataset_cfg)


def build_classifier(cfg):
    """The classifier as the runner builds it: mmpretrain configs keep ``data_preprocessor``
    (mean/std, BGR->RGB) at the top level, and the runner moves it into the model."""
    from mmpretrain.registry import MODELS

    model_cfg = cfg.model.copy()
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    return MODELS.build(model_cfg)


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
    except ConfigError as e:
        sys.exit(f'error: {e}')
    from mmengine.dataset import pseudo_collate
    from mmengine.dist import barrier, get_dist_info
    from mmengine.registry import init_default_scope
    from mmengine.utils import ProgressBar

    from mmvitreg.engine.checkpoint import CheckpointError, load_weights

    if args.launcher != 'none':
        init_dist(args.launcher)
    rank, world_size = get_dist_info()
    init_default_scope(cfg.default_scope)

    dataset = build_dataset(cfg, args.split, args.img_size, args.region)
    prefix = dataset.data_prefix['img_path']
    num_classes = (cfg.model.get('head') or {}).get('num_classes')
    todo, done, invalid = [], 0, []
    for i in range(len(dataset)):
        path = label_map_path(args.label_root, dataset.get_data_info(i)['img_path'], prefix)
        problem = existing_map_problem(path, args.topk, num_classes)
        if problem is None:
            done += 1
        else:
            todo.append(i)
            invalid += [problem] if os.path.lexists(path) else []
    if invalid and rank == 0:
        print(f'{len(invalid)} existing label maps are not valid and are written again; the first: {invalid[0]}')
    barrier()  # every rank scans before any writes, so all shard the same todo list
    todo = todo[rank::world_size]

    classifier = build_classifier(cfg)
    try:
        # the teacher writes the targets: every parameter must come from the file (a random head would write
        # random maps), as for tools/test.py
        load_weights(classifier, args.checkpoint, 'partial' if args.allow_partial else 'strict', hint=PARTIAL_HINT)
    except CheckpointError as e:
        sys.exit(f'error: {e}')
    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    classifier.to(device).eval()
    annotator = DenseAnnotator(classifier)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(dataset, todo),
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        collate_fn=pseudo_collate,
    )

    progress = ProgressBar(len(todo)) if rank == 0 and todo else None
    agree = labelled = 0
    with torch.no_grad():
        for data in loader:
            data = classifier.data_preprocessor(data, False)
            logits = annotator(data['inputs'])
            values, indices = logits.topk(args.topk, dim=-1)
            for sample, value, index in zip(data['data_samples'], values, indices):
                path = label_map_path(args.label_root, sample.img_path, prefix)
                save_label_map(path, value.permute(2, 0, 1), index.permute(2, 0, 1))
            if 'gt_label' in data['data_samples'][0]:
                gt = torch.cat([s.gt_label for s in data['data_samples']]).to(device)
                agree += int((logits.mean((1, 2)).argmax(-1) == gt).sum())
                labelled += len(gt)
            if progress is not None:
                progress.update(len(data['data_samples']))
    if rank == 0:
        print()
    agreement = f'{100.0 * agree / labelled:.2f}%' if labelled else 'n/a'
    print(
        f'rank {rank}/{world_size}: wrote {len(todo)} label maps to {args.label_root} '
        f'({done} valid ones were there and kept, {len(invalid)} invalid ones rewritten); pooled-map top-1 agreement '
        f'with the ground truth: {agreement}'
    )


if __name__ == '__main__':
    main()
