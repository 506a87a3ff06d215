"""The command line the ``*_to_mmvitreg.py`` converters of this folder share (they import it as
``checkpoint_converter``: a script's folder is first on ``sys.path``)."""

import argparse
import sys
from typing import Callable, Dict, Optional, Sequence

import torch

from mmvitreg.engine.checkpoint import CheckpointError, read_checkpoint
from mmvitreg.fileio import UNSAFE_LOAD_HELP
from mmvitreg.models.converters import revise_keys, unwrap_checkpoint


def convert_checkpoint_file(
    src: str,
    dst: str,
    convert: Callable[[Dict[str, torch.Tensor]], Dict[str, torch.Tensor]],
    ema: bool = False,
    unsafe_load: bool = False,
) -> Dict[str, torch.Tensor]:
    """Read an official checkpoint (:func:`read_checkpoint`: local or remote, the allow-list unless
    ``unsafe_load``), convert its state dict with ``convert`` and save ``{'state_dict': converted}`` to ``dst``
    (loadable by ``load_from`` and by ``init_cfg=dict(type='Pretrained', checkpoint=dst)``, with
    ``prefix='backbone.'`` for a backbone alone).

    Raises:
        CheckpointError: ``src`` cannot be read, or holds keys ``convert`` does not know (they are listed).
    """
    checkpoint = read_checkpoint(src, 'cpu', unsafe=unsafe_load or None)
    try:
        converted = convert(revise_keys(unwrap_checkpoint(checkpoint, ema=ema)))
    except (KeyError, ValueError) as e:
        raise CheckpointError(f'checkpoint {src} does not convert: {e.args[0]}') from None
    torch.save({'state_dict': converted}, dst)
    return converted


def converter_cli(
    convert: Callable[[Dict[str, torch.Tensor]], Dict[str, torch.Tensor]],
    description: str,
    argv: Optional[Sequence[str]] = None,
    configure: Callable = None,
) -> None:
    """Command line ``SRC DST [--ema] [--unsafe-load]`` of the tools in ``tools/model_converters/``; a refusal
    is one ``error:`` line. ``configure(parser)`` adds a tool's own options and returns, from the parsed
    arguments, the converter to use (default: ``convert``)."""
    parser = argparse.ArgumentParser(description=description.strip().splitlines()[0])
    parser.add_argument('src', help='official checkpoint (.pth / .pth.tar; a local path or a URL)')
    parser.add_argument('dst', help='output checkpoint')
    parser.add_argument(
        '--ema', action='store_true', help='convert the EMA weights (state_dict_ema / model_ema) if present'
    )
    parser.add_argument('--unsafe-load', action='store_true', help=UNSAFE_LOAD_HELP)
    pick = configure(parser) if configure else None
    args = parser.parse_args(argv)
    try:
        converted = convert_checkpoint_file(
            args.src, args.dst, pick(args) if pick else convert, ema=args.ema, unsafe_load=args.unsafe_load
        )
    except CheckpointError as e:
        sys.exit(f'error: {e}')
    print(f'saved {len(converted)} tensors to {args.dst}')
