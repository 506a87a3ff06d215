"""The digits claims report (issue 16): the tie rule, the fragment-per-section writer, and a run of
``tools/analysis_tools/claims_report.py --size ci`` over every registered section."""

import importlib
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_tool
from studies.claims import assemble, core, register_section, sections, verdict


@pytest.fixture
def two_sections(monkeypatch):
    """A registry holding only two sections, 'b' registered before 'a' but placed after it."""
    monkeypatch.setattr(core, '_SECTIONS', {})
    register_section('b', 'Second technique', 20, 5)(lambda ctx: 'BODY OF SECOND')
    register_section('a', 'First technique', 10, 5)(lambda ctx: 'BODY OF FIRST')
    return sections()


def test_difference_smaller_than_the_spread_is_a_tie():
    assert verdict([89.0, 92.0, 95.0], [89.0, 90.0, 91.0]) == 'tie'  # +2 < std 3
    assert verdict([90.0, 92.0, 94.0], [89.5, 90.0, 90.5]) == 'better'  # +2 = std 2: not smaller
    assert verdict([95.0, 96.0, 97.0], [90.0, 90.5, 91.0]) == 'better'
    assert verdict([90.0, 90.5, 91.0], [95.0, 96.0, 97.0]) == 'worse'
    assert verdict([1.0, 1.1, 1.2], [2.0, 2.1, 2.2], higher_is_better=False) == 'better'
    assert verdict([97.0], [95.0]) == 'n/a (1 seed)'


def test_running_one_section_writes_its_fragment_and_claims_md_keeps_registry_order(two_sections, tmp_path):
    first, second = two_sections
    assert [first.name, second.name] == ['a', 'b']
    core.run_sections(['b'], 'ci', tmp_path / 'docs', tmp_path / 'work', log=lambda line: None)
    assert (tmp_path / 'work' / 'data' / core.DIGITS / 'meta' / 'train.txt').is_file()
    assert sorted(p.name for p in (tmp_path / 'docs' / 'claims').iterdir()) == ['b.md']
    text = (tmp_path / 'docs' / 'claims.md').read_text()
    assert text == assemble(tmp_path / 'docs')
    assert re.findall(r'^## (.*)$', text, flags=re.M) == ['First technique', 'Second technique']
    first_part, second_part = text.split('## Second technique')
    # the section run has its body and the command that re-runs it; the other a placeholder
    assert 'BODY OF SECOND' in second_part and '--size ci --sections b' in second_part
    assert 'Not run yet' in first_part and '--sections a' in first_part


def test_a_section_name_is_registered_once(two_sections):
    with pytest.raises(KeyError, match='registered twice'):
        register_section('a', 'x', 0, 1)(lambda ctx: '')


def test_few_shot_subset_takes_the_same_first_images_of_every_class(tmp_path):
    ctx = core.Context('s', 'full', (0, 1, 2), tmp_path, tmp_path)
    ctx.build_data()
    ann = ctx.subset(3)
    subset = [line.split() for line in (ctx.data_root / ann).read_text().splitlines()]
    train = [line.split() for line in (ctx.data_root / 'meta' / 'train.txt').read_text().splitlines()]
    for c in map(str, range(10)):
        assert [n for n, label in subset if label == c] == [n for n, label in train if label == c][:3]
    assert len(subset) == 30
    assert ctx.data_options(3)['train_dataloader.dataset.ann_file'] == ann
    assert (
        core.Context('s', 'ci', (0,), tmp_path, tmp_path).data_options(50)['train_dataloader.dataset.ann_file']
        == f'meta/train_{core.CI_PER_CLASS}pc.txt'
    )
    with pytest.raises(ValueError, match='images per class asked'):
        ctx.subset(1000)


def test_ci_size_report_fills_every_registered_section_with_numbers_and_plots(tmp_path):
    """The CI size of the report: every section (the registered ones, whoever added them) runs end to
    end through the real tools and writes its text with numbers and its plots."""
    out = tmp_path / 'docs'
    run_tool(
        ['analysis_tools/claims_report.py', '--size', 'ci', '--out', out, '--work-dir', tmp_path / 'work'],
        cwd=tmp_path,
        timeout=900,
    )
    text = (out / 'claims.md').read_text()
    for section in sections():
        part = text.split(f'## {section.title}\n')[1].split('\n## ')[0]
        assert f'--size ci --sections {section.name}' in part, section.name
        assert re.search(r'\d+\.\d+ ± \d+\.\d+', part), f'{section.name}: no mean ± std in its text'
        figures = re.findall(r'\]\((claims/[^)]+\.png)\)', part)
        assert figures, f'{section.name}: no plot'
        for fig in figures:
            assert (out / fig).stat().st_size > 1000, fig


def test_committed_claims_md_is_assembled_from_the_committed_fragments(tmp_path):
    """docs/claims.md is what ``claims_report.py --assemble`` makes of docs/claims/<section>.md (after
    merging branches that ran different sections, re-assemble)."""
    import shutil

    shutil.copytree(REPO / 'docs' / 'claims', tmp_path / 'claims')
    assert assemble(tmp_path) == (REPO / 'docs' / 'claims.md').read_text(), (
        'docs/claims.md is stale: python tools/analysis_tools/claims_report.py --assemble'
    )


def test_tools_are_imported_from_the_folder_of_the_configs_or_refused(tmp_path, monkeypatch):
    """The study runs ``tools/train.py`` as the module ``tools.train`` of :data:`core.ROOT` (the repository
    here, ``mmvitreg/.mim`` in a wheel); a different ``tools`` first on ``sys.path`` is refused by name."""
    for name in ('tools', 'tools.train'):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert Path(core._tool('train.py').__file__) == core.ROOT / 'tools' / 'train.py'
    assert (core.ROOT / 'configs' / 'deepvit').is_dir()

    (tmp_path / 'tools').mkdir()
    (tmp_path / 'tools' / 'train.py').write_text('def main(argv=None):\n    pass\n')
    monkeypatch.setattr(sys, 'path', [str(tmp_path), str(core.ROOT), *sys.path])
    for name in ('tools', 'tools.train'):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.invalidate_caches()
    try:
        with pytest.raises(ImportError, match='another package named "tools" comes first') as refused:
            core._tool('train.py')
        assert str(tmp_path / 'tools' / 'train.py') in str(refused.value)
    finally:
        for name in ('tools', 'tools.train'):
            sys.modules.pop(name, None)
