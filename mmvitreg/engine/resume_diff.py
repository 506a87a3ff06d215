"""What a resumed run changes against the run it resumes: what it refuses, and one warning for the rest.

mmengine stores the run's config in every checkpoint (``checkpoint['meta']['cfg']``, its ``pretty_text``) and
:meth:`~mmengine.runner.Runner.resume` restores the optimizer's and the schedulers' states, the seed and the loop
counters from the file, whatever the new config says. :func:`resume_changes` compares the two configs and sorts each
difference by what the resumed run does with it (each group is a resume run in ``tests/test_resume_says_what_runs.py``):

* *refused* (it cannot be honoured): another optimizer type (the old type's state would be loaded into it) and
  other scheduler types or another number of schedulers (mmengine gives each new scheduler the state of the one at
  its index: a ``StepLR`` given a cosine's state follows neither schedule);
* *overridden by the resumed state*: the optimizer's settings (``optim_wrapper.optimizer.*``, ``paramwise_cfg``: the
  optimizer state's parameter groups carry lr, weight decay, betas, ...; ``auto_scale_lr``: the lr comes from that
  state, unscaled), the schedulers' (``param_scheduler``: a scheduler's state holds every attribute) and
  ``randomness.seed`` (mmengine re-seeds with the checkpoint's; :class:`~mmvitreg.engine.hooks.RNGStateHook` gives
  the sampler and the data-loader workers the seeds of the checkpoint's run);
* *taken from the new config*: everything else (the pipeline, a backbone's ``drop_path_rate``, the batch size, ...).

What only the built run shows (other parameter groups, an epoch length that the resumed schedulers do not count,
a removed EMA hook) :class:`~mmvitreg.engine.GuardedRunner` adds.
"""
from typing import Any, Dict, List, Optional, Tuple

from mmengine.config import Config

#: settings that belong to the run, not to the training (they may differ on every resume)
RUN_KEYS = ('work_dir', 'load_from', 'resume', 'launcher', 'experiment_name', 'checkpoint_policy')
#: prefixes whose values the resumed state overrides, and what the warning says of each
RESTORED = (('optim_wrapper.optimizer.', 'the optimizer state keeps {old}'),
            ('optim_wrapper.paramwise_cfg', 'the optimizer state keeps {old}'),
            ('auto_scale_lr', 'the lr comes from the optimizer state, unscaled'),
            ('param_scheduler', "the schedulers' state keeps {old}"),
            ('randomness.seed', "the whole run follows the checkpoint's seed {old}, the data order included"))


def flatten(node: Any, prefix: str = '') -> Dict[str, Any]:
    """``{'a.b.0.c': value}`` of a config's nested dicts and lists."""
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(node))
    else:
        return {prefix: node}
    flat = {}
    for key, value in items:
        flat.update(flatten(value, f'{prefix}{key}.') if isinstance(value, (dict, list, tuple)) and value
                    else {f'{prefix}{key}': value})
    return flat


def refused_by_state(key: str) -> bool:
    """Whether a change of ``key`` leaves a resumed state with nothing it belongs to: the optimizer's type, or a
    scheduler's type (also a scheduler added or removed)."""
    return key == 'optim_wrapper.optimizer.type' or key.startswith('param_scheduler') and key.endswith('.type')


def resume_changes(saved_text: Optional[str], current: Config,
                   notes: Tuple[str, ...] = ()) -> Tuple[List[str], Optional[str]]:
    """What ``current`` changes against the config ``saved_text`` of the checkpoint, sorted as the module says.

    Args:
        saved_text (str, optional): ``checkpoint['meta']['cfg']`` (a config's ``pretty_text``); None: not saved.
        current (Config): The resumed run's config.
        notes (tuple[str]): What the runner found besides (e.g. which weights the run continues from), a group of
            the warning.

    Returns:
        tuple: the refused changes (``'key old -> new (why)'``) and the warning of the others and ``notes`` (None
        when there is nothing to say).
    """
    try:
        saved = Config.fromstring(saved_text, file_format='.py') if isinstance(saved_text, str) else current
    except Exception as e:  # a config text that no longer parses (written by another mmengine or package version)
        return [], f'the checkpoint\'s config does not parse ({type(e).__name__}), so what the new config changes ' \
                   'cannot be listed'
    current = Config.fromstring(current.pretty_text, file_format='.py')  # both as pretty_text writes them
    old, new = flatten(saved.to_dict()), flatten(current.to_dict())
    refused, restored, taken = [], [], []
    changed = sorted(k for k in old.keys() | new.keys()
                     if old.get(k, '<unset>') != new.get(k, '<unset>') and k.split('.')[0] not in RUN_KEYS)
    for key in changed:
        was = old.get(key, '<unset>')
        change = f'{key} {was!r} -> {new.get(key, "<unset>")!r}'
        by = next((what for prefix, what in RESTORED if key.startswith(prefix)), None)
        if refused_by_state(key):
            refused.append(f'{change} (the state resumed for it belongs to {was!r})')
        elif by is not None:
            restored.append(f'{change} ({by.format(old=repr(was))})')
        else:
            taken.append(change)
    groups = (('overridden by the resumed state', restored),
              ('taken from the new config (the training so far used the old value)', taken),
              ('the resumed weights', notes))
    parts = [f'{title}: ' + '; '.join(group) for title, group in groups if group]
    if not parts:
        return refused, None
    count = f'the config differs from the checkpoint\'s in {len(restored) + len(taken)} settings; '
    return refused, (count if restored or taken else '') + ' | '.join(parts)
