"""Print which trace users (heads, auxiliary losses, target transforms, token mixes) each backbone serves.

    python tools/analysis_tools/trace_support.py

Every cell is the verdict of the check a ``mmvitreg.TokenClassifier`` makes when it is built
(:mod:`mmvitreg.analysis.trace_support`): a user a backbone cannot serve fails with this message.
"""
import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.analysis.trace_support import format_table, support_table

if __name__ == '__main__':
    print(format_table(support_table()))
