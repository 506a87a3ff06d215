import warnings

from .batch_mix import BatchMix
from .block_mix import BlockMix
from .mix_token import MixToken
from .mixup_cutmix_switch import MixupCutMixSwitch
from .patch_cutmix import PatchCutMix
from .pixel_mixup import PixelMixup
from .random_patch_mix import RandomPatchMix
from .token_mask_mix import TokenMaskMix

__all__ = ['BatchMix', 'TokenMaskMix', 'MixToken', 'PatchCutMix', 'PixelMixup', 'MixupCutMixSwitch',
           'RandomPatchMix', 'BlockMix']


def __getattr__(name: str):
    """``TokenMix``, :class:`BatchMix`'s old name: works for one release, with a ``DeprecationWarning``."""
    if name == 'TokenMix':
        warnings.warn('mmvitreg.models.mixing.TokenMix is deprecated and will be removed in the next release: use '
                      'BatchMix (the base of the pixel and token mixes)', DeprecationWarning, stacklevel=2)
        return BatchMix
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
