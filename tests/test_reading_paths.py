"""The reading paths in the techniques' READMEs point at the code they name: every range exists, starts where a
definition (or the module docstring) starts, ends on code, and the counts add up to the total the text states."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
READMES = [REPO / 'configs' / name / 'README.md' for name in ('lvvit', 'tlalign', 'drloc', 'diversepatch', 'deepvit')]
ROW = re.compile(r'^\| \d+ \| `([^`]+)` \| ([\d\-, ]+) \| (\d+) \|', re.M)
STARTS = ('"""', 'r"""', '@', 'def ', 'class ', '    def ', '    @')


@pytest.mark.parametrize('readme', READMES, ids=lambda p: p.parent.name)
def test_reading_path_ranges_start_at_definitions_and_add_up(readme):
    text = readme.read_text()
    rows = ROW.findall(text[text.index('## Reading path') :])
    assert rows, f'{readme}: no reading-path table'
    total = 0
    for path, ranges, count in rows:
        lines = (REPO / path).read_text().splitlines()
        spans = [tuple(map(int, r.split('-'))) for r in ranges.split(', ')]
        for first, last in spans:
            assert 1 <= first <= last <= len(lines), f'{path} {first}-{last}: outside its {len(lines)} lines'
            assert lines[first - 1].startswith(STARTS), f'{path}:{first} starts no definition: {lines[first - 1]!r}'
            assert lines[last - 1].strip(), f'{path}:{last} is blank: the range ends past its code'
        assert sum(last - first + 1 for first, last in spans) == int(count), f'{path}: count {count}'
        total += int(count)
    assert f'{total:,} lines in {len(rows)} files' in text, f'{readme}: the stated total is not {total:,}'
