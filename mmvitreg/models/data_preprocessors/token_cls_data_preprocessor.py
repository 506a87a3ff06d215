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

    Token labels (token labeling, `Jiang et al. 2021 <https://arxiv.org/abs/2104.10858>`_, Eq. 6):
    when the data samples carry ``token_label_map`` (a
    :class:`~mmvitreg.datasets.token_label_target.PackedLabelMap` from ``mmvitreg.TokenLabelTarget``),
    the preprocessor reads the maps of the whole batch under every token at once, on the inputs'
    device (:func:`~mmvitreg.datasets.token_label_target.token_label_targets`), and replaces the
    field by ``token_label``: float32 ``(2, K, S, S)`` per sample, what ``TokenLabelHead`` reads; maps
    packed with ``reading='official'`` also give ``relabel_label`` ``(2, K')``, the official
    class-token (ReLabel) target of the crop (:func:`~mmvitreg.datasets.token_label_target.relabel_targets`).
    This happens in training and evaluation alike (evaluation pipelines normally carry no maps).

    mmpretrain's batch augments map ``(inputs, scores) -> (inputs, scores)`` and cannot say
    *which* tokens came from *which* image. A batch mix (e.g. :class:`MixToken`) instead draws a
    :class:`~mmvitreg.models.trace.MixPlan`; in training this preprocessor

    1. normalises/stacks the batch and makes one-hot ``gt_score`` as its parent does;
    2. draws the plan with ``mix.plan(inputs)``; the images stay unmixed and the backbone mixes
       their patch tokens (MixToken), unless the plan mixes in pixel space (``plan.in_pixels``, e.g.
       :class:`PatchCutMix`): then the preprocessor mixes the images with ``plan.mix_images``;
    3. mixes every ``gt_score`` by the plan (MixToken Eq. 10: ``lam * y + (1 - lam) * y[index]``,
       ``lam`` the mask mean), so any classification head gets the right image-level target (the
       token-label targets stay per image: ``TokenLabelHead`` mixes them, ``mix_token_label_target``);
    4. returns the plan as the extra key ``mix_plan``, which mmengine passes to the model's
       ``forward(..., mix_plan=...)`` (:class:`TokenClassifier` takes it; a model that cannot
       fails loudly instead of training silently unmixed).

    Args:
        mix (dict | BatchMix, optional): A batch mix (:class:`~mmvitreg.models.mixing.BatchMix`) or its config,
            built from mmvitreg's ``MODELS`` (e.g. ``dict(type='mmvitreg.MixToken')``). It replaces image-level
            Mixup/CutMix, so it cannot be combined with ``batch_augments``. Defaults to None.
        **kwargs: The arguments of :class:`ClsDataPreprocessor` (``mean``, ``std``, ``to_rgb``,
            ``num_classes``, ...). ``num_classes`` is needed with ``mix``.

    Raises:
        TypeError: ``mix`` is not a batch mix (e.g. mmpretrain's ``CutMix``, which belongs in
            ``batch_augments``).
    """

    def __init__(self, mix: Optional[dict] = None, **kwargs):
        if mix is not None and kwargs.get('batch_augments'):
            raise ValueError('mix replaces the image-level batch augments (Mixup/CutMix); '
                             f'got both mix={mix} and batch_augments={kwargs["batch_augments"]}')
        super().__init__(**kwargs)
        self.mix = None
        if mix is not None:
            self.mix = MODELS.build(mix) if isinstance(mix, dict) else mix
            if not isinstance(self.mix, BatchMix):
                raise TypeError(f'mix must be a batch mix of mmvitreg (a BatchMix: MixToken, PatchCutMix, '
                                f'PixelMixup, ...), got {type(self.mix).__name__}; image-level augments such as '
                                "mmpretrain's Mixup/CutMix go in train_cfg.augments")
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
        inputs, data_samples = data['inputs'], data['data_samples']
        plan = self.mix.plan(inputs)
        if plan.in_pixels:
            data['inputs'] = plan.mix_images(inputs)
        scores = plan.mix_labels(torch.stack([s.gt_score for s in data_samples]))
        for sample, score in zip(data_samples, scores):
            sample.set_gt_score(score)
        data['mix_plan'] = plan
        return data
