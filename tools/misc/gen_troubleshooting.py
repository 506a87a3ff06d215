"""Write docs/troubleshooting.md from the catalogue in tools/misc/troubleshooting.py.

    python tools/misc/gen_troubleshooting.py [--out docs/troubleshooting.md] [--check]

``--check`` writes nothing and exits 1 when the file differs from what the catalogue generates.
"""

import argparse
import sys
from pathlib import Path

from troubleshooting import render_markdown  # its neighbour, the catalogue

DEFAULT = Path(__file__).resolve().parents[2] / 'docs' / 'troubleshooting.md'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default=str(DEFAULT), help='the Markdown file to write')
    parser.add_argument('--check', action='store_true', help='only check that the file is up to date')
    args = parser.parse_args(argv)
    text = render_markdown()
    out = Path(args.out)
    if args.check:
        if not out.is_file() or out.read_text() != text:
            sys.exit(f'{out} is not up to date: run python tools/misc/gen_troubleshooting.py')
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
