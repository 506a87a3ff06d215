"""Re-estimate BatchNorm statistics before validation, as DeepViT's official training does."""

import copy
from itertools import islice
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
    before each validation, ``max_iter=50`` un-augmented training batches through the model in evaluation mode with
    its BatchNorms in training mode, statistics reset and ``momentum=None`` (a cumulative average). This hook does so
    on the model about to be validated (with ``EMAHook``, which swaps first, the EMA weights; the official code
    recalibrates the raw model). Not mmpretrain's ``PreciseBNHook``, which runs after a training epoch on augmented
    batches with the whole model (drop path included) in training mode.

    Args:
        num_batches (int): Batches to average. Defaults to 50 (official ``--max_iter``).
        dataloader (dict | Iterable, optional): The calibration data: a dataloader config or any iterable of data
            batches. None: the training set read with the validation pipeline (official ``loader_cali``, ``no_aug``).
            Defaults to None.
        batch_size (int, optional): Batch size of the default dataloader. Defaults to the training dataloader's
            (official ``--cali_batch_size 256`` on one GPU).
        restore_momentum (bool): Put each norm's momentum back after recalibrating. Defaults to False
            (official: ``momentum=None`` stays).
    """

    priority = 'NORMAL'

    def __init__(
        self,
        num_batches: int = 50,
        dataloader: Optional[Union[dict, Iterable]] = None,
        batch_size: Optional[int] = None,
        restore_momentum: bool = False,
    ):
        if not isinstance(num_batches, int) or num_batches < 1:
            raise ValueError(f'num_batches must be a positive int, got {num_batches!r}')
        self.num_batches, self.dataloader, self.batch_size = num_batches, dataloader, batch_size
        self.restore_momentum = restore_momentum
        self._loader = None if dataloader is None or isinstance(dataloader, dict) else dataloader

    def before_val_epoch(self, runner) -> None:
        if self._loader is None:
            cfg = self.dataloader or calibration_dataloader_cfg(runner.cfg, self.batch_size)
            self._loader = runner.build_dataloader(cfg, seed=runner.seed)
        self.recalibrate(unwrap_model(runner.model), self._loader)

    def recalibrate(self, model: nn.Module, batches: Iterable) -> List[nn.Module]:
        """Reset every BatchNorm of ``model`` and re-estimate it on the first ``num_batches`` of ``batches``
        (cumulative averages); returns the norms. The model is left in eval mode."""
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
            for seen, data in enumerate(islice(batches, self.num_batches), 1):
                model._run_forward(model.data_preprocessor(data, False), mode='tensor')
        if not seen:
            raise RuntimeError(
                'BNRecalibrationHook read no batch from its calibration data (an empty data set, '
                'or drop_last with fewer images than batch_size): set batch_size or dataloader'
            )
        for m, momentum in zip(norms, momenta):
            m.eval()
            if self.restore_momentum:
                m.momentum = momentum
        return norms


def calibration_dataloader_cfg(cfg, batch_size: Optional[int] = None) -> dict:
    """The default calibration dataloader of :class:`BNRecalibrationHook`: the training dataloader config with the
    validation pipeline (official ``no_aug`` calibration loader)."""
    if 'train_dataloader' not in cfg or 'val_dataloader' not in cfg:
        raise ValueError(
            'BNRecalibrationHook reads the training set with the validation pipeline: the config '
            'needs train_dataloader and val_dataloader (or pass dataloader=...)'
        )
    loader = copy.deepcopy(cfg['train_dataloader'])
    loader = loader.to_dict() if hasattr(loader, 'to_dict') else dict(loader)
    loader['dataset']['pipeline'] = copy.deepcopy(cfg['val_dataloader']['dataset']['pipeline'])
    if batch_size is not None:
        loader['batch_size'] = batch_size
    return loader
