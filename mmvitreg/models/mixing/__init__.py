from .mix_token import MixToken

__all__ = ['MixToken']
