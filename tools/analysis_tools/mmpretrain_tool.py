"""Run one of mmpretrain's own tools on any config, ``mmvitreg::`` configs and ``mmvitreg.X`` types included.

    python tools/analysis_tools/mmpretrain_tool.py NAME [ARGS ...]
    python tools/analysis_tools/mmpretrain_tool.py --list

NAME is the file name of a tool that the installed mmpretrain ships under ``mmpretrain/.mim/tools/``
(``get_flops``, ``print_config``, ``browse_dataset``, ``confusion_matrix``, ``analyze_results``,
``vis_scheduler``, ``analyze_logs``, ``eval_metric``, ``verify_dataset``, ...); ARGS are that tool's own
arguments (``NAME --help`` prints them). mmpretrain's tools do not import mmvitreg, so on their own they
refuse ``_base_ = 'mmvitreg::...'`` ("mmengine does not support to load mmvitreg config") and cannot build
``type='mmvitreg.X'``. This wrapper imports :mod:`mmvitreg` first (the stack workarounds of
:mod:`mmvitreg.compat`, the ``mmvitreg::`` config scope and our registries), then runs the tool unchanged
as ``__main__``, so its flags, output and behaviour are mmpretrain's. ``browse_dataset`` gets two fixes on
the way (:data:`FIXES`), without which it fails on every config that inherits an ``mmpretrain::`` base
and, on matplotlib >= 3.10, in every mode but ``original``.
"""

import inspect
import runpy
import sys
from pathlib import Path

# the folders of mmpretrain/.mim/tools that hold tools run on a config or its results
FOLDERS = ('analysis_tools', 'misc', 'visualization')


def mmpretrain_tools():
    """``{name: path}`` of the tools the installed mmpretrain ships, e.g. ``'get_flops'``."""
    import mmpretrain

    root = Path(mmpretrain.__file__).parent / '.mim' / 'tools'
    found = {p.stem: p for folder in FOLDERS for p in sorted((root / folder).glob('*.py')) if p.stem != 'utils'}
    if not found:
        sys.exit(
            f'error: no tools found under {root}: this mmpretrain was installed without its .mim/tools '
            '(install mmpretrain from its wheel, e.g. `pip install mmpretrain`)'
        )
    return found


def drop_visualizer_scope():
    """Make ``Config.fromfile`` drop the ``_scope_`` key of the config's ``visualizer``.

    mmengine stamps ``_scope_='mmpretrain'`` on each dict a config inherits from an ``mmpretrain::`` base (all
    of ours do, and so does any config of one's own written like them); ``browse_dataset`` passes
    ``cfg.visualizer`` to ``UniversalVisualizer(**kwargs)``, which rejects the key. The scope is the
    tool's own (it calls ``init_default_scope('mmpretrain')``), so nothing is lost.
    """
    from mmengine.config import Config

    fromfile = Config.fromfile

    def fromfile_unscoped_visualizer(*args, **kwargs):
        cfg = fromfile(*args, **kwargs)
        if isinstance(cfg.get('visualizer'), dict):
            cfg.visualizer.pop('_scope_', None)
        return cfg

    Config.fromfile = staticmethod(fromfile_unscoped_visualizer)


def pass_renderer_to_adjust_bbox():
    """Give ``matplotlib._tight_bbox.adjust_bbox`` its figure's renderer when the caller passes none.

    ``browse_dataset`` calls ``adjust_bbox(figure, bbox)`` (modes ``transformed``, ``concat``,
    ``pipeline``); matplotlib 3.10 made ``renderer`` a required argument. A matplotlib whose function
    does not require it (or lacks the private module) is left as it is.
    """
    try:
        from matplotlib import _tight_bbox

        renderer = inspect.signature(_tight_bbox.adjust_bbox).parameters.get('renderer')
    except (ImportError, AttributeError, ValueError):
        return
    if renderer is None or renderer.default is not inspect.Parameter.empty:
        return
    adjust_bbox = _tight_bbox.adjust_bbox

    def adjust_bbox_own_renderer(fig, bbox_inches, renderer=None, fixed_dpi=None):
        return adjust_bbox(fig, bbox_inches, renderer or fig.canvas.get_renderer(), fixed_dpi)

    _tight_bbox.adjust_bbox = adjust_bbox_own_renderer


# what a tool needs on the way (besides ``import mmvitreg``)
FIXES = {'browse_dataset': (drop_visualizer_scope, pass_renderer_to_adjust_bbox)}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ('-h', '--help', '--list'):
        tools = mmpretrain_tools()
        print(__doc__.strip() if argv[:1] != ['--list'] else '', 'tools:', ' '.join(tools), sep='\n')
        return
    tools = mmpretrain_tools()
    name = argv[0].removesuffix('.py')
    if name not in tools:
        sys.exit(f'error: mmpretrain has no tool {argv[0]!r}; available: {", ".join(tools)}')
    import mmvitreg  # noqa: F401  (applies mmvitreg.compat: the mmvitreg:: scope and our components)

    for fix in FIXES.get(name, ()):
        fix()
    path = tools[name]
    sys.argv = [str(path), *argv[1:]]
    sys.path.insert(0, str(path.parent))  # as when the tool is run directly (it may import its neighbours)
    runpy.run_path(str(path), run_name='__main__')


if __name__ == '__main__':
    main()
