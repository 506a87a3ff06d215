from .batch_mix import BatchMix
from .block_mix import BlockMix
from .mix_token import MixToken
from .mixup_cutmix_switch import MixupCutMixSwitch
from .patch_cutmix import PatchCutMix
from .pixel_mixup import PixelMixup
from .random_patch_mix import RandomPatchMix

__all__ = ['BatchMix', 'MixToken', 'PatchCutMix', 'PixelMixup', 'MixupCutMixSwitch', 'RandomPatchMix', 'BlockMix']
