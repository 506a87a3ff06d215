"""Which trace user fits which backbone: the build-time check of every pair, as a table
(``tools/analysis_tools/trace_support.py`` prints it).

A *trace user* is a component of mmvitreg (a head, an auxiliary loss, a target transform or a batch mix)
whose instance carries a ``trace_request`` (:class:`~mmvitreg.models.trace.TraceRequest`); the request
follows the instance's arguments (``PatchContrastiveLoss(form='official')`` asks for other taps than the
paper form). So every row is a built instance: each registered user at its defaults (:func:`registered_users`,
with the arguments a user cannot do without, :data:`USER_ARGS`), the settings of :data:`USER_VARIANTS` that ask
for something else, or, with ``config``, every trace user of a model config as configured. A *trace backbone* is a
registered backbone of mmvitreg whose ``forward`` takes a ``trace``. For every pair :func:`support_table` runs
:func:`~mmvitreg.models.trace.check_request`, the check a :class:`~mmvitreg.models.classifiers.TokenClassifier`
makes when it is built, on the backbone built with :data:`BACKBONE_PRESETS` (its default architecture), or, with
``config``, on the config's own ``model.backbone`` as configured (its sizes: the one column), and words the part
of the request that fails in a few words (:func:`cell`). mmpretrain's backbones take no trace: they share one
column, checked on a ResNet-18.

A *model kind* (:data:`MODEL_KINDS`: ``cls`` the image classifier, ``seg`` the segmentor, ``det`` the
detectors) adds its own check, the one its models make first: a kind without an image-level target (``seg``,
``det``) refuses the users that need one (:func:`~mmvitreg.models.trace_users.check_image_target`, cell
``'image target'``).
"""

import functools
import inspect
from typing import Dict, List, Optional, Tuple

import torch

from mmvitreg.models.trace import FACTS, POINTS, SERVICES, TraceRequest, TraceUserError, check_request, resolve_indices
from mmvitreg.models.trace_users import check_image_target

#: the settings each trace backbone is checked with (its default architecture: the block count
#: decides whether a default tap exists); a registered trace backbone missing here is an error
BACKBONE_PRESETS: Dict[str, dict] = {
    'VisionTransformer': dict(arch='deit-small', img_size=224),
    'DeepViT': dict(arch='s', img_size=224),
    'LVViT': dict(arch='s', img_size=224, out_type='raw'),  # as its configs (TokenLabelHead reads every token)
    'SwinTransformer': dict(arch='tiny', img_size=224),
    'CvT': dict(arch='13'),
}
#: the column of every mmpretrain backbone (none takes a trace), and the one built to check it
MMPRETRAIN = 'mmpretrain.*'
MMPRETRAIN_PROBE = dict(type='mmpretrain.ResNet', depth=18)
OK = '✓'


#: the model kinds with trace users: the registered models of each (mmvitreg's ``MODELS``; the first names the
#: kind) and their library
MODEL_KINDS: Dict[str, Tuple[Tuple[str, ...], str]] = {
    'cls': (('TokenClassifier',), 'mmpretrain'),
    'seg': (('TokenSegmentor',), 'mmseg'),
    'det': (('TokenCascadeRCNN', 'TokenMaskRCNN', 'TokenFasterRCNN', 'TokenTwoStageDetector'), 'mmdet'),
}
IMAGE_TARGET = 'image target'


def kind_image_targets(kind: str) -> bool:
    """Whether the models of ``kind`` (a key of :data:`MODEL_KINDS`) have an image-level target."""
    from mmvitreg.registry import MODELS

    return getattr(MODELS.get(MODEL_KINDS[kind][0][0]), 'image_targets', True)


def model_kind_of(model_type: Optional[str]) -> Optional[str]:
    """The kind of a config's ``model.type`` (``'mmvitreg.TokenSegmentor'`` -> ``'seg'``), None for another model."""
    name = str(model_type or '').removeprefix('mmvitreg.')
    return next((kind for kind, (models, _) in MODEL_KINDS.items() if name in models), None)


#: further rows: settings whose request differs from the default's
USER_VARIANTS: Dict[str, List[dict]] = {
    'PatchContrastiveLoss': [dict(form='official')],
    'PatchCosineLoss': [dict(tokens='final_norm')],
    'PatchMixingLoss': [dict(tokens='final_norm')],
}
#: the modules whose registered components are trace users (heads, losses, target transforms, batch mixes)
USER_MODULES = tuple(f'mmvitreg.models.{m}.' for m in ('heads', 'losses', 'target_transforms', 'mixing'))
#: the arguments a registered trace user cannot be built without: the widths of DeiT-S at ImageNet's classes (its
#: request's taps do not depend on them; a width is checked per model)
USER_ARGS: Dict[str, dict] = {
    'DRLoc': dict(in_channels=384),
    'PatchMixingLoss': dict(num_classes=1000, in_channels=384),
    'TokenLabelHead': dict(num_classes=1000, in_channels=384),
}


def user_label(name: str, args: dict) -> str:
    """A user's name with its arguments: ``'PatchContrastiveLoss'``, ``"PatchContrastiveLoss(form='official')"``."""
    return name + (f'({", ".join(f"{k}={v!r}" for k, v in args.items())})' if args else '')


def registered_users() -> List[Tuple[str, object]]:
    """``(label, instance)`` of every registered trace user of mmvitreg (an instance with a ``trace_request``):
    each at its defaults (plus :data:`USER_ARGS`) and at each setting of :data:`USER_VARIANTS` (labelled by
    :func:`user_label`), by label."""
    from mmvitreg.registry import MODELS

    MODELS.import_from_location()
    users = []
    for name, cls in MODELS.module_dict.items():
        if cls.__module__.startswith(USER_MODULES):
            for variant in [{}] + USER_VARIANTS.get(name, []):
                user = cls(**USER_ARGS.get(name, {}), **variant)
                if isinstance(getattr(user, 'trace_request', None), TraceRequest):
                    users.append((user_label(name, variant), user))
    return sorted(users, key=lambda row: row[0])


def trace_users(config: Optional[str] = None) -> List[Tuple[str, object]]:
    """``(row, built instance)`` for every trace user: each registered user of mmvitreg (:func:`registered_users`);
    with ``config`` (a model config file, ``mmvitreg::`` or a path) instead the trace users of its ``model`` as
    configured (head, auxiliary losses, target transform, batch mix), named after their place in the config."""
    return registered_users() if config is None else _config_users(config)


def _config_users(config: str) -> List[Tuple[str, TraceRequest]]:
    from mmengine.registry import MODELS, DefaultScope

    from mmvitreg.utils import load_config

    cfg = load_config(config)
    model = cfg.model
    places = [
        ('head', model.get('head')),
        ('target_transform', model.get('target_transform')),
        ('mix', (model.get('train_cfg') or {}).get('mix')),
    ]
    places += [(f'aux_losses[{i}]', cfg) for i, cfg in enumerate(model.get('aux_losses') or ())]
    users = []
    for place, part in places:
        if not part or not str(part.get('type', '')).startswith('mmvitreg.'):
            continue  # mmpretrain's heads read no trace
        args = {k: v for k, v in part.items() if k != 'type'}
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            user = MODELS.build(dict(part))
        if isinstance(getattr(user, 'trace_request', None), TraceRequest):
            users.append((f'{place}: {user_label(part["type"][len("mmvitreg.") :], args)}', user))
    return users


def config_model_kind(config: str) -> Optional[str]:
    """The model kind of a config's model (:func:`model_kind_of`)."""
    from mmvitreg.utils import load_config

    return model_kind_of(load_config(config).model.get('type'))


def trace_backbones() -> List[str]:
    """Names of the registered mmvitreg backbones that take a token trace."""
    from mmvitreg.registry import MODELS

    MODELS.import_from_location()
    return sorted(
        name
        for name, cls in MODELS.module_dict.items()
        if cls.__module__.startswith('mmvitreg.models.backbones')
        and 'trace' in inspect.signature(cls.forward).parameters
    )


def mmpretrain_backbones() -> List[str]:
    """Names of mmpretrain's registered backbones, none of which takes a trace (the note under the table)."""
    import mmpretrain.models  # noqa: F401  (registers them)
    from mmpretrain.registry import MODELS

    return sorted(
        name for name, cls in MODELS.module_dict.items() if cls.__module__.startswith('mmpretrain.models.backbones')
    )


def _build_for_check(cfg: dict, scope: Optional[str] = None):
    """``cfg`` built on the meta device (no weights), or on the CPU when its constructor reads tensor values."""
    from mmengine.registry import MODELS, DefaultScope

    with DefaultScope.overwrite_default_scope(scope):
        try:
            with torch.device('meta'):
                return MODELS.build(dict(cfg))
        except Exception:  # noqa: BLE001  (any constructor that computes with its tensors)
            return MODELS.build(dict(cfg))


@functools.lru_cache(maxsize=None)
def backbone_for_check(name: str):
    """The backbone column ``name`` is checked on (:data:`BACKBONE_PRESETS`, or mmpretrain's probe)."""
    return _build_for_check(
        MMPRETRAIN_PROBE if name == MMPRETRAIN else dict(type=f'mmvitreg.{name}', **BACKBONE_PRESETS[name])
    )


@functools.lru_cache(maxsize=None)
def config_backbone(config: str) -> Tuple[str, object]:
    """``(column name, backbone)``: the config's own ``model.backbone``, built as configured (its sizes)."""
    from mmvitreg.utils import load_config

    cfg = load_config(config)
    backbone = _build_for_check(cfg.model.backbone, cfg.default_scope)
    return f"{str(cfg.model.backbone.type).removeprefix('mmvitreg.')} (config)", backbone


def support_table(
    users: Optional[List[str]] = None,
    backbones: Optional[List[str]] = None,
    config: Optional[str] = None,
    model_kind: str = 'cls',
) -> Dict[str, Dict[str, str]]:
    """``{backbone: {user: '✓' | the check's short reason}}``, a user per row of :func:`trace_users`.

    Args:
        users (List[str], optional): User names (``'TLAlign'`` or ``'mmvitreg.TLAlign'``: every row of that
            component; or a row's full name) to keep. Defaults to all (:func:`trace_users`).
        config (str, optional): A model config: its trace users as configured instead of the registered
            ones (see :func:`trace_users`), checked on its own backbone as configured (:func:`config_backbone`,
            the first column; the ``backbones`` named too follow it).
        backbones (List[str], optional): Backbone names (``'CvT'``, ``'mmvitreg.CvT'``,
            ``'mmpretrain'``) to keep. Defaults to all (:func:`trace_backbones` and ``mmpretrain.*``).
        model_kind (str): A key of :data:`MODEL_KINDS`: the cells are the verdicts of building a model of that
            kind (``'seg'``, ``'det'``: ``'image target'`` for a user that needs an image-level target).
            Defaults to ``'cls'``.

    Raises:
        KeyError: an unknown user or backbone name (the message lists the known ones), or a
            registered trace backbone without an entry in :data:`BACKBONE_PRESETS`.
    """
    if model_kind not in MODEL_KINDS:
        raise KeyError(f'unknown model kind {model_kind!r}; known: {", ".join(MODEL_KINDS)}')
    model_name, image_targets = MODEL_KINDS[model_kind][0][0], kind_image_targets(model_kind)
    all_users = trace_users(config)
    chosen_users = _select(users, [u for u, _ in all_users], 'trace user')
    names = trace_backbones() + [MMPRETRAIN]
    missing = [b for b in names[:-1] if b not in BACKBONE_PRESETS]
    if missing:
        raise KeyError(f'no preset for the trace backbone(s) {missing}: add them to BACKBONE_PRESETS')
    columns = {}
    if config is not None:
        name, backbone = config_backbone(config)
        columns[name] = backbone
    if config is None or backbones:
        columns.update((name, None) for name in _select(backbones, names, 'backbone'))
    table = {}
    for name, backbone in columns.items():
        backbone = backbone or backbone_for_check(name)
        row = table[name] = {}
        for user, instance in all_users:
            if user in chosen_users:
                row[user] = cell(backbone, instance, model_name, image_targets, registered=config is None)
    return table


def cell(
    backbone, user, model_name: str = 'TokenClassifier', image_targets: bool = True, registered: bool = True
) -> str:
    """The verdict of building ``user`` with ``backbone`` in a model ``model_name``: ``'✓'``, ``"✓ out_type='raw'"``
    (fits once the backbone is built with that output format), or the part of the request the check refuses in a
    few words, found by checking each part on its own in the check's order. A ``registered`` row's widths and
    patch size are its defaults, set per model: they are not judged."""
    try:
        check_image_target(user, model_name, image_targets)
    except TraceUserError:
        return IMAGE_TARGET
    spec, request = getattr(backbone, 'trace_spec', None), getattr(user, 'trace_request', None) or TraceRequest()
    fails = lambda **part: _refused(spec, TraceRequest(**part))  # noqa: E731
    if spec is None:
        return 'no trace' if request.needs_trace else OK
    missing = [
        n
        for kind, names in (('services', request.all_services), ('points', request.points), ('facts', request.facts))
        for n in sorted(names)
        if fails(**{kind: {n}})
    ]
    if missing:
        return 'no ' + ', '.join(missing)
    for part, indices, count, kind in (
        ('token_layers', request.token_layers, spec.num_blocks, 'block'),
        ('attn_layers', request.attn_layers, spec.num_blocks, 'block'),
        ('stages', request.stages, spec.num_stages, 'stage'),
    ):
        if fails(**{part: indices}):
            return f'only {count} {kind}s' if _out_of_range(indices, count) else f'taps {spec.tappable_text} only'
    if fails(out_type=request.out_type):
        settable = request.out_type in spec.out_types
        return f'{OK} out_type={request.out_type!r}' if settable else f'no {request.out_type} output'
    if fails(outputs=request.outputs):
        return f'only {len(spec.out_channels)} outputs'
    for part, offered in (
        (dict(token_layers=request.token_layers, token_channels=request.token_channels), spec.channels),
        (dict(stages=request.stages, stage_channels=request.stage_channels), spec.stage_channels),
        (dict(outputs=request.outputs, out_channels=request.out_channels), spec.out_channels),
    ):
        if fails(**part):
            indices = next(iter(part.values()))
            return (
                OK
                if registered
                else ', '.join(str(offered[i]) for i in resolve_indices(indices, len(offered))) + ' channels'
            )
    if fails(stream=request.stream):
        return f'{spec.num_blocks} blocks, not {request.stream.num_layers}'
    if fails(patch_size=request.patch_size):
        return OK if registered else f'patch_size {spec.patch_stride}'
    return OK


def _refused(spec, request: TraceRequest) -> bool:
    try:
        check_request(spec, request, 'user', 'backbone')
    except TraceUserError:
        return True
    return False


def _out_of_range(indices, count: int) -> bool:
    try:
        resolve_indices(indices, count)
    except IndexError:
        return True
    return False


def _select(wanted: Optional[List[str]], known: List[str], what: str) -> List[str]:
    """The entries of ``known`` that ``wanted`` names: by full name or, for a row such as
    ``"aux_losses[0]: PatchContrastiveLoss(form='official')"``, by its component's name."""
    if not wanted:
        return known
    component = lambda k: k.split(': ')[-1].split('(')[0]  # noqa: E731
    out = []
    for name in wanted:
        key = name.lower().removeprefix('mmvitreg.')
        hits = [k for k in known if key in (k.lower(), component(k).lower())] or (
            [MMPRETRAIN] if key == 'mmpretrain' and MMPRETRAIN in known else []
        )
        if not hits:
            raise KeyError(f'unknown {what} {name!r}; known: {", ".join(dict.fromkeys(map(component, known)))}')
        out += [k for k in hits if k not in out]
    return out


def kind_summary(table: Dict[str, Dict[str, str]], model_kind: str) -> List[str]:
    """What the models of ``model_kind`` serve in ``table`` (a :func:`support_table` of that kind), in words:
    the models, the users they serve on at least one backbone, and those they refuse on every one."""
    models, library = MODEL_KINDS[model_kind]
    users = list(next(iter(table.values()))) if table else []
    cells = lambda u: [row[u] for row in table.values()]  # noqa: E731
    served = [u for u in users if any(c.startswith(OK) for c in cells(u))]
    target = [u for u in users if all(c == IMAGE_TARGET for c in cells(u))]
    other = [u for u in users if u not in served and u not in target]
    lines = [
        f'model kind {model_kind} ({library}: ' + ', '.join(f'mmvitreg.{m}' for m in models) + ')',
        '  serves: ' + (', '.join(served) or 'none') + ' (where a column shows ' + OK + ')',
    ]
    if target:
        lines.append('  refuses (image-level target): ' + ', '.join(target))
    if other:
        lines.append('  on none of these backbones: ' + ', '.join(other))
    if library != 'mmpretrain':
        lines.append(f"  {library}'s own backbones take no trace either: they serve what the {MMPRETRAIN} column shows")
    return lines


def format_table(table: Dict[str, Dict[str, str]], model_kind: str = 'cls', config: Optional[str] = None) -> str:
    """The table as text: a row per trace user, a column per backbone (``✓`` or why not), then the
    block counts the taps were checked against, what the short reasons mean and what the model kind serves
    (:func:`kind_summary`); ``config``: the table was made for that config (its own backbone's column)."""
    backbones = list(table)
    users = list(next(iter(table.values()))) if table else []
    first = max([len('trace user')] + [len(u) for u in users])
    widths = [max([len(b)] + [len(table[b][u]) for u in users]) for b in backbones]
    line = lambda cells: '  '.join(c.ljust(w) for c, w in zip(cells, [first] + widths)).rstrip()  # noqa: E731
    lines = [line(['trace user'] + backbones), line(['-' * first] + ['-' * w for w in widths])]
    lines += [line([u] + [table[b][u] for b in backbones]) for u in users]
    lines.append('')
    for b in backbones:
        if config is not None and b == config_backbone(config)[0]:
            spec = getattr(config_backbone(config)[1], 'trace_spec', None)
            lines.append(
                f"{b}: the config's model.backbone as configured, "
                + (f'{spec.num_blocks} blocks' if spec is not None else 'which takes no trace')
            )
        elif b == MMPRETRAIN:
            names = mmpretrain_backbones()
            lines.append(
                f'{MMPRETRAIN}: all {len(names)} mmpretrain backbones ({", ".join(names[:4])}, ...) take no '
                f'trace; a {OK} user reads only the backbone outputs'
            )
        else:
            lines.append(
                f'{b}: checked as arch={BACKBONE_PRESETS[b]["arch"]!r}, '
                f'{backbone_for_check(b).trace_spec.num_blocks} blocks'
            )
    lines += [
        'each row is a built instance, at its defaults unless its arguments are shown (the taps of an '
        'instance follow its arguments, e.g. AttentionCosineLoss(num_pairs), DRLoc(layers))',
        "'no X': the backbone does not offer X; 'only N blocks': a default tap past the backbone's last block; "
        f"'taps A..B only': a tap outside the blocks it traces; '{OK} out_type=X': fits once the backbone is "
        "built with that output format; 'no trace': the backbone takes no token trace",
    ]
    known = {**SERVICES, **POINTS, **FACTS}
    used = sorted(
        {
            c
            for row in table.values()
            for r in row.values()
            if r.startswith('no ')
            for c in r[3:].split(', ')
            if c in known
        }
    )
    lines += [f'  {c}: {known[c]}' for c in used]
    if any(r == IMAGE_TARGET for row in table.values() for r in row.values()):
        lines.append(
            f"'{IMAGE_TARGET}': the user trains with one label per image, which a model of this kind "
            'does not have (its targets are per pixel or per box): refused when the model is built'
        )
    lines += [''] + kind_summary(table, model_kind)
    return '\n'.join(lines)
