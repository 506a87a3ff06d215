"""Convert an official DiversePatch checkpoint (ChengyueGongR/PatchVisionTransformer) to an mmvitreg checkpoint.

Usage: python tools/model_converters/diversepatch_to_mmvitreg.py SRC DST [--mixing-index 2] [--ema] [--unsafe-load]

The result loads into the configs of configs/diversepatch (a ``TokenClassifier`` with ``mmvitreg.VisionTransformer``,
``VisionTransformerClsHead`` and the three losses, the mixing loss third); the released DeiT checkpoints were trained
with talking heads (official default ``use_talk=True``): build the backbone with ``attn_types='talking_heads'``.
The official evaluation ensemble (``t_acc``) is ``PatchMixingLoss(ensemble=True, tokens='final_norm')``.
``--ema`` converts the official checkpoint's EMA weights (``model_ema``) instead of the model's (``model``, which
the official code evaluates). ``load_from`` / ``init_cfg`` / ``tools/test.py`` take the official file directly.
"""
import argparse
from functools import partial

from mmvitreg.compat import UNSAFE_LOAD_HELP
from mmvitreg.models.converters import convert_checkpoint_file, convert_diversepatch


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='official checkpoint (.pth)')
    parser.add_argument('dst', help='output checkpoint')
    parser.add_argument('--mixing-index', type=int, default=2,
                        help='position of the PatchMixingLoss in the model\'s aux_losses (default: 2)')
    parser.add_argument('--ema', action='store_true', help='convert the EMA weights (model_ema) instead of model')
    parser.add_argument('--unsafe-load', action='store_true', help=UNSAFE_LOAD_HELP)
    args = parser.parse_args(argv)
    convert = partial(convert_diversepatch, mixing_index=args.mixing_index)
    converted = convert_checkpoint_file(args.src, args.dst, convert, ema=args.ema, unsafe_load=args.unsafe_load)
    print(f'saved {len(converted)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
