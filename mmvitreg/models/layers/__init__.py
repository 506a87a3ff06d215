"""Building blocks of the mmvitreg backbones: attention kinds (global and windowed), patch embeddings, the block."""

from .attention import MultiheadSelfAttention, attend
from .conv_stem import ConvStem
from .patch_embed import token_grid
from .re_attention import ReAttention
from .ride import Ride
from .talking_heads import TalkingHeadsAttention
from .transformer_block import TransformerBlock
from .window_attention import WindowAttention
from .window_layout import WindowLayout

__all__ = [
    'MultiheadSelfAttention',
    'ReAttention',
    'TalkingHeadsAttention',
    'ConvStem',
    'token_grid',
    'TransformerBlock',
    'WindowAttention',
    'WindowLayout',
    'Ride',
    'attend',
]
