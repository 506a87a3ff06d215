"""Convert an official DiversePatch checkpoint (ChengyueGongR/PatchVisionTransformer) to an mmvitreg checkpoint.

Usage: python tools/model_converters/diversepatch_to_mmvitreg.py SRC DST [--mixing-index 2] [--ema] [--unsafe-load]

The result loads into the configs of configs/diversepatch (a ``TokenClassifier`` with ``mmvitreg.VisionTransformer``,
``VisionTransformerClsHead`` and the three losses, the mixing loss third); the released DeiT checkpoints were trained
with talking heads (official default ``use_talk=True``): build the backbone with ``attn_types='talking_heads'``.
The official evaluation ensemble (``t_acc``) is ``PatchMixingLoss(ensemble=True, tokens='final_norm')``.
``--ema`` converts the official checkpoint's EMA weights (``model_ema``) instead of the model's (``model``, which
the official code evaluates). ``load_from`` / ``init_cfg`` / ``tools/test.py`` take the official file directly.
"""

from functools import partial

from checkpoint_converter import converter_cli

from mmvitreg.models.converters import convert_diversepatch


def mixing_index_option(parser):
    """``--mixing-index``: where the model's PatchMixingLoss sits; returns the converter for the parsed arguments."""
    parser.add_argument(
        '--mixing-index',
        type=int,
        default=2,
        help='position of the PatchMixingLoss in the model\'s aux_losses (default: 2)',
    )
    return lambda args: partial(convert_diversepatch, mixing_index=args.mixing_index)


def main(argv=None):
    converter_cli(convert_diversepatch, __doc__, argv, configure=mixing_index_option)


if __name__ == '__main__':
    main()
