"""Classification data preprocessor that also reads token labels and draws a batch mix's plan."""

from typing import Optional

import torch
from mmpretrain.models.utils import ClsDataPreprocessor

from mmvitreg.datasets.token_label_target import relabel_targets, token_label_targets
from mmvitreg.registry import MODELS

from ..mixing import BatchMix


@MODELS.register_module()
class TokenClsDataPreprocessor(ClsDataPreprocessor):
    """mmpretrain's :class:`ClsDataPreprocessor` plus token labels and a batch mix (token- or pixel-level).

    Token labels (LV-ViT, `Jiang et al. 2021 <https://arxiv.org/abs/2104.10858>`_, Eq. 6): a sample's
    ``token_label_map`` (from ``mmvitreg.TokenLabelTarget``) is read for the whole batch at once, on the inputs'
    device (:func:`~mmvitreg.datasets.token_label_target.token_label_targets`), into ``token_label``, float32
    ``(2, K, S, S)``; maps of ``reading='official'`` also give ``relabel_label`` ``(2, K')``, the crop's official
    ReLabel target. In training and evaluation alike.

    A batch mix (:class:`~mmvitreg.models.mixing.BatchMix`) replaces mmpretrain's batch augments, which cannot
    say which token came from which image. In training, after its parent's work, this preprocessor

    1. draws the plan with ``mix.plan(inputs)`` and mixes the images when the plan mixes pixels
       (``plan.in_pixels``; MixToken's tokens are mixed by the backbone);
    2. mixes every ``gt_score`` by the plan (``lam * y + (1 - lam) * y[index]``, ``lam`` the mask mean: MixToken
       Eq. 10), so any head gets the image target (``TokenLabelHead`` mixes the token labels);
    3. returns the plan as ``mix_plan``, which mmengine passes to the model's ``forward(..., mix_plan=...)``
       (a model that cannot take it fails loudly instead of training unmixed).

    Args:
        mix (dict | BatchMix, optional): A batch mix or its config (e.g. ``dict(type='mmvitreg.MixToken')``);
            not with ``batch_augments``. Defaults to None.
        **kwargs: The arguments of :class:`ClsDataPreprocessor` (``mean``, ``std``, ``to_rgb``,
            ``num_classes``, ...). ``num_classes`` is needed with ``mix``.

    Raises:
        TypeError: ``mix`` is not a batch mix (mmpretrain's ``CutMix`` belongs in ``batch_augments``).
    """

    def __init__(self, mix: Optional[dict] = None, **kwargs):
        if mix is not None and kwargs.get('batch_augments'):
            raise ValueError('mix replaces the image-level batch_augments (Mixup/CutMix): give one of them')
        super().__init__(**kwargs)
        self.mix = None
        if mix is not None:
            self.mix = MODELS.build(mix) if isinstance(mix, dict) else mix
            if not isinstance(self.mix, BatchMix):
                raise TypeError(
                    f'mix must be a batch mix of mmvitreg (a BatchMix: MixToken, PatchCutMix, '
                    f'PixelMixup, ...), got {type(self.mix).__name__}; image-level augments such as '
                    "mmpretrain's Mixup/CutMix go in train_cfg.augments"
                )
            self.to_onehot = True

    def forward(self, data: dict, training: bool = False) -> dict:
        """Preprocess as :class:`ClsDataPreprocessor`, read the token labels; in training also draw
        and apply the plan."""
        data = super().forward(data, training)
        data_samples = data['data_samples']
        if data_samples and 'token_label_map' in data_samples[0]:
            packed = [s.token_label_map for s in data_samples]
            targets = token_label_targets(packed, data['inputs'].device)
            relabels = relabel_targets(packed, data['inputs'].device) if packed[0].reading == 'official' else None
            for i, (sample, target) in enumerate(zip(data_samples, targets)):
                del sample.token_label_map
                sample.set_field(target, 'token_label')
                if relabels is not None:
                    sample.set_field(relabels[i], 'relabel_label')
        if not training or self.mix is None:
            return data
        plan = self.mix.plan(data['inputs'])
        if plan.in_pixels:
            data['inputs'] = plan.mix_images(data['inputs'])
        scores = plan.mix_labels(torch.stack([s.gt_score for s in data_samples]))
        for sample, score in zip(data_samples, scores):
            sample.set_gt_score(score)
        data['mix_plan'] = plan
        return data
