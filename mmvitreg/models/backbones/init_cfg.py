"""mmvitreg's backbones load their own ``init_cfg=dict(type='Pretrained')`` through ``mmvitreg.Pretrained``."""
from typing import List, Optional, Union

InitCfg = Optional[Union[dict, List[dict]]]


def own_pretrained(init_cfg: InitCfg) -> InitCfg:
    """``init_cfg`` with each ``type='Pretrained'`` entry scoped to mmvitreg (``_scope_='mmvitreg'``), so that
    mmengine's ``initialize`` builds ``mmvitreg.Pretrained`` (official releases converted, the backbone fit checked)
    instead of mmengine's ``PretrainedInit``, without replacing anything of mmengine's. The type stays
    ``'Pretrained'``: mmengine's and mmpretrain's ``init_weights`` keep loaded weights only for that type. An entry
    that names its own ``_scope_`` (e.g. ``'mmengine'``) keeps it.
    """
    if isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained':
        return {'_scope_': 'mmvitreg', **init_cfg}
    if isinstance(init_cfg, list):
        return [own_pretrained(cfg) for cfg in init_cfg]
    return init_cfg
