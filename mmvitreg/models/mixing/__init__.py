from .mix_token import MixToken
from .patch_cutmix import PatchCutMix

__all__ = ['MixToken', 'PatchCutMix']
