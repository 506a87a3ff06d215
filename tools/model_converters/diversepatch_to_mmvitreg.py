"""Convert an official DiversePatch checkpoint (ChengyueGongR/PatchVisionTransformer) to an mmvitreg checkpoint.

Usage: python tools/model_converters/diversepatch_to_mmvitreg.py SRC DST [--mixing-index 2]

The result loads into the configs of configs/diversepatch (a ``TokenClassifier`` with ``mmvitreg.VisionTransformer``,
``VisionTransformerClsHead`` and the three losses, the mixing loss third); the released DeiT checkpoints were trained
with talking heads (official default ``use_talk=True``): build the backbone with ``attn_types='talking_heads'``.
The official evaluation ensemble (``t_acc``) is ``PatchMixingLoss(ensemble=True, tokens='final_norm')``.
"""
import argparse
from functools import partial

from mmvitreg.models.converters import convert_checkpoint_file, convert_diversepatch


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='official checkpoint (.pth)')
    parser.add_argument('dst', help='output checkpoint')
    parser.add_argument('--mixing-index', type=int, default=2,
                        help='position of the PatchMixingLoss in the model\'s aux_losses (default: 2)')
    args = parser.parse_args(argv)
    converted = convert_checkpoint_file(args.src, args.dst, partial(convert_diversepatch,
                                                                    mixing_index=args.mixing_index))
    print(f'saved {len(converted)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
