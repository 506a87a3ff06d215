"""UperNet configs of the repository shrunk to tiny backbones and heads reading the bundled digits sets (ADE20K
or Cityscapes layout), written as one file: shared by the segmentation tests."""

from pathlib import Path
from typing import Sequence

from conftest import CONFIGS
from mmengine.config import Config

DIGITS = {
    'ade20k': CONFIGS / '_base_' / 'datasets' / 'digits_ade20k.py',
    'cityscapes': CONFIGS / '_base_' / 'datasets' / 'digits_cityscapes.py',
}
NUM_CLASSES = 11  # background + 10 digits in both layouts
# a Swin in miniature: four stages of one block, widths 16 .. 128
TINY_SWIN = dict(embed_dims=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2])


def digits_layout(cfg: Config) -> str:
    """The digits set standing in for the config's data: Cityscapes' layout for a Cityscapes config."""
    return 'cityscapes' if 'Cityscapes' in cfg.test_dataloader.dataset.type else 'ade20k'


def shrunk_config(seg_config: Path, path: Path, arch: dict = None, keep: Sequence[str] = ()) -> Path:
    """The UperNet config ``seg_config`` with a tiny backbone (``arch``, a ViT-family arch dict; a Swin gets
    :data:`TINY_SWIN`) and heads, reading the digits set of its data's layout, written to ``path`` (a ``.json``
    path writes it fastest: a ``.py`` one is formatted by yapf).

    The backbone keeps its other settings (its ``drop_path_rate`` for a drop-path schedule, say), and those of
    ``keep`` as the config has them (``init_cfg``, a Swin's ``window_size``; absent stays absent); 2 training
    iterations; the whole image at test time."""
    import mmvitreg  # noqa: F401  (mmseg:: bases need mmvitreg.compat)

    cfg = Config.fromfile(str(seg_config))
    digits = Config.fromfile(str(DIGITS[digits_layout(cfg)]))
    for key in (
        'train_dataloader',
        'val_dataloader',
        'test_dataloader',
        'val_evaluator',
        'test_evaluator',
        'tta_pipeline',
    ):
        cfg[key] = digits[key]
    cfg.train_dataloader.batch_size = 2
    cfg.model.data_preprocessor.size = digits.crop_size
    backbone = cfg.model.backbone
    own = {key: backbone[key] for key in keep if key in backbone}
    if 'Swin' in backbone.type:
        backbone.update(arch=TINY_SWIN, img_size=digits.crop_size, window_size=4, init_cfg=None)
        widths = [16, 32, 64, 128]
    else:
        backbone.update(arch=arch, img_size=digits.crop_size, out_indices=(0, 1, 2, 3), init_cfg=None)
        widths = [32] * 4
        if cfg.model.neck.type == 'MultiLevelNeck':
            cfg.model.neck.update(in_channels=[32] * 4, out_channels=32)
        else:  # the side layers: one token width in, a wider fourth level out
            cfg.model.neck.update(in_channels=32, out_channels=64)
            widths = [32, 32, 32, 64]
    for key in keep:
        backbone.pop(key, None)
    backbone.update(own)
    cfg.model.decode_head.update(in_channels=widths, channels=32, num_classes=NUM_CLASSES)
    cfg.model.auxiliary_head.update(
        in_channels=widths[cfg.model.auxiliary_head.in_index], channels=16, num_classes=NUM_CLASSES
    )
    cfg.model.test_cfg = dict(mode='whole')
    cfg.train_cfg.update(max_iters=2, val_interval=2)
    cfg.default_hooks.checkpoint.interval = 2
    cfg.dump(str(path))
    return path
