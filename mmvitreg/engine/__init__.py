from .hooks import *  # noqa
