"""Can I put this trace user (TL-Align, DRLoc, token labeling, a DiversePatch loss, MixToken ...) on that backbone?

    python tools/analysis_tools/trace_support.py [--user NAME ...] [--backbone NAME ...] [--config CONFIG]
                                                 [--model-kind {cls,seg,det}]

Prints a table with a row per trace user and a column per backbone: ``✓``, or in a few words why the model
would not build. Every cell is the verdict of the checks a model of the kind (``--model-kind``: ``cls``
``mmvitreg.TokenClassifier``, the default; ``seg`` ``mmvitreg.TokenSegmentor``; ``det`` ``mmvitreg.TokenCascadeRCNN``
and the other ``mmvitreg.Token*`` detectors; with ``--config`` the kind of its model) makes when it is built
(``studies/trace_support.py``, next to this script), with the user built (at its defaults, at the settings that ask for
other taps, or, with ``--config``, as the config's model sets it) and the backbone at its default architecture
(with ``--config``: the config's own backbone at its sizes, then only the ``--backbone`` columns asked for).
Under the table: the users the model kind serves and those it refuses (``seg`` and ``det`` have no image-level
target).
"""

import argparse
import sys

from studies.trace_support import MODEL_KINDS, config_model_kind, format_table, support_table

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.utils import ConfigError


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Which trace user (TLAlign, DRLoc, TokenLabelHead, ...) each '
        'backbone serves: the build-time check of every pair'
    )
    parser.add_argument('--user', nargs='+', metavar='NAME', help='only these trace users (e.g. TLAlign DRLoc)')
    parser.add_argument(
        '--backbone', nargs='+', metavar='NAME', help='only these backbones (e.g. CvT SwinTransformer mmpretrain)'
    )
    parser.add_argument(
        '--config',
        metavar='CONFIG',
        help="the trace users of this config's model, as configured, instead of every registered one",
    )
    parser.add_argument(
        '--model-kind',
        choices=list(MODEL_KINDS),
        help='the model the users are checked in: cls (mmvitreg.TokenClassifier), seg '
        '(mmvitreg.TokenSegmentor), det (mmvitreg.TokenCascadeRCNN and the other Token* detectors); '
        "default: the kind of the --config's model, else cls",
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        kind = args.model_kind or (args.config and config_model_kind(args.config)) or 'cls'
        table = support_table(args.user, args.backbone, args.config, kind)
    except (KeyError, ConfigError) as e:
        sys.exit(f'error: {e.args[0]}')
    print(format_table(table, kind, args.config))


if __name__ == '__main__':
    main()
