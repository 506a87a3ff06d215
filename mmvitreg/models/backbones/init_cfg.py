"""mmvitreg's backbones load their own ``init_cfg=dict(type='Pretrained')`` through ``mmvitreg.Pretrained``, and
name the output norms their configuration leaves out, whose keys a classifier's checkpoint still holds."""

from typing import Iterable, List, Optional, Tuple, Union

from torch import nn

InitCfg = Optional[Union[dict, List[dict]]]


def own_pretrained(init_cfg: InitCfg) -> InitCfg:
    """``init_cfg`` with each ``type='Pretrained'`` entry scoped to mmvitreg (``_scope_='mmvitreg'``), so that
    mmengine's ``initialize`` builds ``mmvitreg.Pretrained`` (official releases converted, the backbone fit checked)
    instead of mmengine's ``PretrainedInit``. The type stays ``'Pretrained'``, the one type whose loaded weights
    mmengine's and mmpretrain's ``init_weights`` keep. An entry that names its own ``_scope_`` keeps it.
    """
    if isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained':
        return {'_scope_': 'mmvitreg', **init_cfg}
    if isinstance(init_cfg, list):
        return [own_pretrained(cfg) for cfg in init_cfg]
    return init_cfg


def unbuilt(backbone: nn.Module, output_norms: Iterable[str]) -> Tuple[str, ...]:
    """The ``output_norms`` (the norms after the last block or stage) that ``backbone``'s options did not build, or
    built without weights: a backbone's ``left_out``. A checkpoint's keys under them (a classifier's final norm in
    a dense backbone) fit nowhere while every block computes what was trained, so the *backbone* load policy
    (:func:`~mmvitreg.engine.checkpoint.judge`) accepts them."""
    return tuple(name for name in output_norms if not list(getattr(backbone, name, nn.Identity()).parameters()))
