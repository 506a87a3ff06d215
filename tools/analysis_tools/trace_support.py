"""Can I put this trace user (TL-Align, DRLoc, token labeling, a DiversePatch loss, MixToken ...) on that backbone?

    python tools/analysis_tools/trace_support.py [--user NAME ...] [--backbone NAME ...] [--config CONFIG]

Prints a table with a row per trace user and a column per backbone: ``✓``, or in a few words why the model
would not build. Every cell is the verdict of the check a ``mmvitreg.TokenClassifier`` makes when it is built
(:mod:`mmvitreg.analysis.trace_support`), with the user built (at its defaults, at the settings that ask for
other taps, or, with ``--config``, as the config's model sets it) and the backbone at its default architecture.
"""
import argparse
import sys

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.analysis.trace_support import format_table, support_table
from mmvitreg.utils import ConfigError


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Which trace user (TLAlign, DRLoc, TokenLabelHead, ...) each '
                                     'backbone serves: the build-time check of every pair')
    parser.add_argument('--user', nargs='+', metavar='NAME', help='only these trace users (e.g. TLAlign DRLoc)')
    parser.add_argument('--backbone', nargs='+', metavar='NAME',
                        help='only these backbones (e.g. CvT SwinTransformer mmpretrain)')
    parser.add_argument('--config', metavar='CONFIG',
                        help="the trace users of this config's model, as configured, instead of every registered one")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        table = support_table(args.user, args.backbone, args.config)
    except (KeyError, ConfigError) as e:
        sys.exit(f'error: {e.args[0]}')
    print(format_table(table))


if __name__ == '__main__':
    main()
