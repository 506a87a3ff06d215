"""Model and data loading shared by the analysis tools (``tools/analysis_tools/``)."""
import logging
import sys
from typing import Iterable, Iterator, Tuple

from mmengine.config import Config
from torch import nn


def build_model(cfg: Config, checkpoint, device: str, strict: bool = False) -> nn.Module:
    """The model of ``cfg`` (its ``data_preprocessor`` filled in as mmengine's Runner does), with
    ``checkpoint`` loaded when given (:func:`mmvitreg.engine.checkpoint.load_weights`, the loader of every tool:
    an official release converted; ``strict``: every key must fit, else the *backbone* policy), else the
    config's initialisation (without mmengine's parameter-by-parameter init log), on ``device``, in eval mode.
    Call it inside ``cfg.default_scope``.

    Raises:
        mmvitreg.engine.CheckpointError: the checkpoint cannot be read or does not fit.
    """
    from mmengine.logging import MMLogger
    from mmengine.registry import MODELS

    from mmvitreg.engine.checkpoint import load_weights
    model_cfg = cfg.model.copy()
    model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    model = MODELS.build(model_cfg)
    if checkpoint:
        load_weights(model, checkpoint, 'strict' if strict else 'backbone')
    else:
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel(logging.WARNING)  # init_weights logs every parameter's initialiser at INFO
        try:
            model.init_weights()
        finally:
            logger.setLevel(level)
    return model.to(device).eval()


def build_dataloader(cfg: Config, split: str, batch_size: int, num_workers: int):
    """The config's ``<split>_dataloader`` in a fixed order with the given batch size and workers.

    Raises:
        mmvitreg.utils.ConfigError: the config has no such dataloader.
    """
    from mmengine.runner import Runner

    from mmvitreg.utils import ConfigError
    key = f'{split}_dataloader'
    if not cfg.get(key):
        raise ConfigError(f'the config has no {key}')
    loader_cfg = cfg[key].copy()
    loader_cfg.update(batch_size=batch_size, num_workers=num_workers, persistent_workers=False)
    loader_cfg.sampler = dict(type='DefaultSampler', shuffle=False)
    return Runner.build_dataloader(loader_cfg)


def first_images(batches: Iterable[dict], num_images: int, split: str = 'data') -> Iterator[Tuple[dict, int]]:
    """``(batch, take)`` for the data-loader batches that hold the first ``num_images`` images: use the
    first ``take`` images of each (the last batch may be cut). Shows a progress bar over the images and
    prints a note when the ``split`` holds fewer than ``num_images``."""
    from mmengine.utils import ProgressBar
    progress = ProgressBar(num_images, file=sys.stdout)
    seen = 0
    for batch in batches:
        take = min(len(batch['inputs']), num_images - seen)
        yield batch, take
        seen += take
        progress.update(take)
        if seen >= num_images:
            break
    sys.stdout.write('\n')
    if seen < num_images:
        print(f'note: the {split} split holds only {seen} images, fewer than the {num_images} asked')
