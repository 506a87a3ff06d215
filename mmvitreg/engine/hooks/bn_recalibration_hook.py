"""Re-estimate BatchNorm statistics before validation, as DeepViT's official training does."""
import copy
from typing import Iterable, List, Optional, Union

import torch
from mmengine.hooks import Hook
from torch import nn

from mmvitreg.registry import HOOKS
from .unwrap import unwrap_model


@HOOKS.register_module()
class BNRecalibrationHook(Hook):
    """Before every validation, recompute every BatchNorm's running statistics on training images.

    DeepViT's official training (zhoudaquan/dvit_repo ``utils/misc.py: bn_calibration``; not in the paper) runs,
    before each validation, ``max_iter=50`` un-augmented training batches through the model in evaluation mode
    with its BatchNorms (every ``torch.nn`` kind here) in training mode, statistics reset and ``momentum=None``
    (a cumulative average). This hook does so in ``before_val_epoch`` on the model about to be validated (with
    ``EMAHook``, which swaps first, the EMA weights; the official code recalibrates the raw model);
    ``restore_momentum=True`` puts each momentum back afterwards (the official code leaves ``None``).

    Not mmpretrain's ``PreciseBNHook``: it runs after a training epoch on the augmented training batches with
    the whole model in training mode (drop path on) and restores the momentum; DeepViT's calibration is before
    validation, of the model validated, on un-augmented images, with only the BatchNorms in training mode.

    Args:
        num_batches (int): Batches to average. Defaults to 50 (official ``--max_iter``).
        dataloader (dict | Iterable, optional): The calibration data: a dataloader config (built by
            the runner) or any iterable of data batches. None: the training set read with the
            validation pipeline, shuffled as the training dataloader (the official ``loader_cali``:
            the training set, ``no_aug``). Defaults to None.
        batch_size (int, optional): Batch size of the default dataloader. Defaults to the training
            dataloader's (official ``--cali_batch_size 256`` on one GPU).
        restore_momentum (bool): Put each norm's momentum back after recalibrating. Defaults to False
            (official: ``momentum=None`` stays).
    """

    priority = 'NORMAL'

    def __init__(self, num_batches: int = 50, dataloader: Optional[Union[dict, Iterable]] = None,
                 batch_size: Optional[int] = None, restore_momentum: bool = False):
        if not isinstance(num_batches, int) or num_batches < 1:
            raise ValueError(f'num_batches must be a positive int, got {num_batches!r}')
        self.num_batches = num_batches
        self.dataloader = dataloader
        self.batch_size = batch_size
        self.restore_momentum = restore_momentum
        self._loader = None

    def before_val_epoch(self, runner) -> None:
        if self._loader is None:
            self._loader = self._build_loader(runner)
        model = unwrap_model(runner.model)
        self.recalibrate(model, self._loader)

    def _build_loader(self, runner):
        if self.dataloader is not None and not isinstance(self.dataloader, dict):
            return self.dataloader
        cfg = self.dataloader
        if cfg is None:
            cfg = calibration_dataloader_cfg(runner.cfg, self.batch_size)
        return runner.build_dataloader(cfg, seed=runner.seed)

    def recalibrate(self, model: nn.Module, batches: Iterable) -> List[nn.Module]:
        """Reset every BatchNorm of ``model`` and re-estimate it on the first ``num_batches`` of
        ``batches`` (cumulative averages); returns the norms. The model is left in eval mode."""
        norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if not norms:
            return norms
        momenta = [m.momentum for m in norms]
        model.eval()
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # running stats = cumulative average of the batch statistics
            m.train()
        seen = 0
        with torch.no_grad():
            for data in batches:
                if seen == self.num_batches:
                    break
                data = model.data_preprocessor(data, False)
                model._run_forward(data, mode='tensor')
                seen += 1
        if not seen:
            raise RuntimeError('BNRecalibrationHook read no batch from its calibration data (an empty data set, '
                               'or drop_last with fewer images than batch_size): set batch_size or dataloader')
        for m, momentum in zip(norms, momenta):
            m.eval()
            if self.restore_momentum:
                m.momentum = momentum
        return norms


def calibration_dataloader_cfg(cfg, batch_size: Optional[int] = None) -> dict:
    """The default calibration dataloader of :class:`BNRecalibrationHook`: the training dataloader
    config with the validation pipeline (official ``no_aug`` calibration loader)."""
    if 'train_dataloader' not in cfg or 'val_dataloader' not in cfg:
        raise ValueError('BNRecalibrationHook reads the training set with the validation pipeline: the config '
                         'needs train_dataloader and val_dataloader (or pass dataloader=...)')
    loader = copy.deepcopy(cfg['train_dataloader'])
    loader = loader.to_dict() if hasattr(loader, 'to_dict') else dict(loader)
    loader['dataset']['pipeline'] = copy.deepcopy(cfg['val_dataloader']['dataset']['pipeline'])
    if batch_size is not None:
        loader['batch_size'] = batch_size
    return loader
