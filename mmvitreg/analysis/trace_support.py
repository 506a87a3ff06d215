"""Which trace user fits which backbone: the build-time check of every pair, as a table.

A *trace user* is a registered component of mmvitreg with a class-level ``trace_request``
(:class:`~mmvitreg.models.trace.TraceRequest`, the request of its default settings): heads,
auxiliary losses, target transforms and token mixes. A *trace backbone* is a registered backbone of
mmvitreg (``accepts_trace``). For every pair :func:`support_table` runs
:func:`~mmvitreg.models.trace.check_trace_user`, the check a
:class:`~mmvitreg.models.classifiers.TokenClassifier` makes when it is built, on the backbone built
with :data:`BACKBONE_PRESETS` (its default architecture), and keeps the check's short reason.
mmpretrain's backbones take no trace: they share one column, checked on a ResNet-18.
``tools/analysis_tools/trace_support.py`` prints it.
"""
import functools
from typing import Dict, List, Optional, Tuple

import torch

from mmvitreg.models.trace import CAPABILITIES, TraceRequest, TraceUserError, check_trace_user

#: the settings each trace backbone is checked with (its default architecture: the block count
#: decides whether a default tap exists); a registered trace backbone missing here is an error
BACKBONE_PRESETS: Dict[str, dict] = {
    'VisionTransformer': dict(arch='deit-small', img_size=224),
    'DeepViT': dict(arch='s', img_size=224),
    'LVViT': dict(arch='s', img_size=224),
    'SwinTransformer': dict(arch='tiny', img_size=224),
    'CvT': dict(arch='13'),
}
#: the column of every mmpretrain backbone (none takes a trace), and the one built to check it
MMPRETRAIN = 'mmpretrain.*'
MMPRETRAIN_PROBE = dict(type='mmpretrain.ResNet', depth=18)
OK = '✓'


def trace_users() -> List[Tuple[str, TraceRequest]]:
    """``(name, class-level request)`` of every registered trace user of mmvitreg, by name."""
    from mmvitreg.registry import MODELS
    MODELS.import_from_location()
    users = []
    for name, cls in MODELS.module_dict.items():
        request = getattr(cls, 'trace_request', None)
        if isinstance(request, TraceRequest):
            users.append((name, request))
    return sorted(users)


def trace_backbones() -> List[str]:
    """Names of the registered mmvitreg backbones that take a token trace."""
    from mmvitreg.registry import MODELS
    MODELS.import_from_location()
    return sorted(name for name, cls in MODELS.module_dict.items() if getattr(cls, 'accepts_trace', False)
                  and cls.__module__.startswith('mmvitreg.models.backbones'))


def mmpretrain_backbones() -> List[str]:
    """Names of mmpretrain's registered backbones, none of which takes a trace (the note under the table)."""
    import mmpretrain.models  # noqa: F401  (registers them)
    from mmpretrain.registry import MODELS
    return sorted(name for name, cls in MODELS.module_dict.items()
                  if cls.__module__.startswith('mmpretrain.models.backbones')
                  and not getattr(cls, 'accepts_trace', False))


@functools.lru_cache(maxsize=None)
def backbone_for_check(name: str):
    """The backbone column ``name`` is checked on (:data:`BACKBONE_PRESETS`, or mmpretrain's probe),
    built on the meta device (no weights), or on the CPU when its constructor reads tensor values."""
    from mmengine.registry import MODELS
    cfg = MMPRETRAIN_PROBE if name == MMPRETRAIN else dict(type=f'mmvitreg.{name}', **BACKBONE_PRESETS[name])
    try:
        with torch.device('meta'):
            return MODELS.build(cfg)
    except Exception:  # noqa: BLE001  (any constructor that computes with its tensors)
        return MODELS.build(cfg)


def support_table(users: Optional[List[str]] = None, backbones: Optional[List[str]] = None
                  ) -> Dict[str, Dict[str, str]]:
    """``{backbone: {user: '✓' | the check's short reason}}``.

    Args:
        users (List[str], optional): User names (``'TLAlign'`` or ``'mmvitreg.TLAlign'``) to keep.
            Defaults to all (:func:`trace_users`).
        backbones (List[str], optional): Backbone names (``'CvT'``, ``'mmvitreg.CvT'``,
            ``'mmpretrain'``) to keep. Defaults to all (:func:`trace_backbones` and ``mmpretrain.*``).

    Raises:
        KeyError: an unknown user or backbone name (the message lists the known ones), or a
            registered trace backbone without an entry in :data:`BACKBONE_PRESETS`.
    """
    all_users = trace_users()
    columns = trace_backbones() + [MMPRETRAIN]
    missing = [b for b in columns[:-1] if b not in BACKBONE_PRESETS]
    if missing:
        raise KeyError(f'no preset for the trace backbone(s) {missing}: add them to BACKBONE_PRESETS')
    chosen_users = _select(users, [u for u, _ in all_users], 'trace user')
    chosen_backbones = _select(backbones, columns, 'backbone')
    table = {}
    for name in chosen_backbones:
        backbone = backbone_for_check(name)
        row = table[name] = {}
        for user, request in all_users:
            if user in chosen_users:
                try:
                    check_trace_user(backbone, request, user)
                    row[user] = OK
                except TraceUserError as e:
                    row[user] = e.reason
    return table


def _select(wanted: Optional[List[str]], known: List[str], what: str) -> List[str]:
    if not wanted:
        return known
    aliases = {k.lower(): k for k in known} | {'mmpretrain': MMPRETRAIN}
    out = []
    for name in wanted:
        key = name.lower().removeprefix('mmvitreg.')
        if key not in aliases:
            raise KeyError(f'unknown {what} {name!r}; known: {", ".join(known)}')
        out.append(aliases[key])
    return out


def format_table(table: Dict[str, Dict[str, str]]) -> str:
    """The table as text: a row per trace user, a column per backbone (``✓`` or why not), then the
    block counts the taps were checked against and what the short reasons mean."""
    backbones = list(table)
    users = list(next(iter(table.values()))) if table else []
    first = max([len('trace user')] + [len(u) for u in users])
    widths = [max([len(b)] + [len(table[b][u]) for u in users]) for b in backbones]
    line = lambda cells: '  '.join(c.ljust(w) for c, w in zip(cells, [first] + widths)).rstrip()  # noqa: E731
    lines = [line(['trace user'] + backbones), line(['-' * first] + ['-' * w for w in widths])]
    lines += [line([u] + [table[b][u] for b in backbones]) for u in users]
    lines.append('')
    for b in backbones:
        if b == MMPRETRAIN:
            names = mmpretrain_backbones()
            lines.append(f'{MMPRETRAIN}: all {len(names)} mmpretrain backbones ({", ".join(names[:4])}, ...) take no '
                         f'trace; a {OK} user reads only the backbone outputs')
        else:
            lines.append(f'{b}: checked as arch={BACKBONE_PRESETS[b]["arch"]!r}, '
                         f'{backbone_for_check(b).num_trace_layers} blocks')
    lines += ['users are checked at their default settings (the taps of an instance follow its arguments, '
              'e.g. AttentionCosineLoss(num_pairs), DRLoc(layers))',
              "'no X': the backbone does not serve X; 'only N blocks': a default tap past the backbone's last block; "
              "'no trace': the backbone takes no token trace"]
    used = sorted({c for row in table.values() for r in row.values() if r.startswith('no ')
                   for c in r[3:].split(', ') if c in CAPABILITIES})
    lines += [f'  {c}: {CAPABILITIES[c]}' for c in used]
    return '\n'.join(lines)
