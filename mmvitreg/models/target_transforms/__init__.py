from .tl_align import TLAlign

__all__ = ['TLAlign']
