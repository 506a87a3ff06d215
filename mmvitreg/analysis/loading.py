"""Model and data loading shared by the analysis tools (``tools/analysis_tools/``)."""
from mmengine.config import Config
from torch import nn


def build_model(cfg: Config, checkpoint, device: str, strict: bool = False) -> nn.Module:
    """The model of ``cfg`` (its ``data_preprocessor`` filled in as mmengine's Runner does), with
    ``checkpoint`` loaded when given (else the config's initialisation; ``strict``: every key must fit), on
    ``device``, in eval mode. Call it inside ``cfg.default_scope``."""
    from mmengine.registry import MODELS
    from mmengine.runner import load_checkpoint
    model_cfg = cfg.model.copy()
    model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    model = MODELS.build(model_cfg)
    if checkpoint:
        load_checkpoint(model, checkpoint, map_location='cpu', strict=strict)
    else:
        model.init_weights()
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
