"""What a resumed run changes against the run it resumes: what it refuses, and one warning for the rest.

mmengine's :meth:`~mmengine.runner.Runner.resume` restores the optimizer's and the schedulers' states, the seed and the
loop counters from the file, whatever the new config says. :func:`resume_changes` compares the new config with the
file's (``checkpoint['meta']['cfg']``) and sorts each difference (each group is a run in
``tests/test_resume_says_what_runs.py``):

* *refused*: another optimizer type, other scheduler types or another number of schedulers (the old state would be
  loaded into a scheduler or an optimizer it does not belong to);
* *overridden by the resumed state*: ``optim_wrapper.optimizer.*``, ``paramwise_cfg`` and ``auto_scale_lr`` (the
  optimizer state's parameter groups carry lr, weight decay, ...), ``param_scheduler`` and ``randomness.seed``;
* *taken from the new config*: everything else (the pipeline, ``drop_path_rate``, the batch size, ...).
"""

from typing import Any, Dict, List, Optional, Tuple

from mmengine.config import Config

#: settings that belong to the run, not to the training (they may differ on every resume)
RUN_KEYS = ('work_dir', 'load_from', 'resume', 'launcher', 'experiment_name', 'checkpoint_policy')
#: prefixes whose values the resumed state overrides, and what the warning says of each
RESTORED = (
    ('optim_wrapper.optimizer.', 'the optimizer state keeps {old}'),
    ('optim_wrapper.paramwise_cfg', 'the optimizer state keeps {old}'),
    ('auto_scale_lr', 'the lr comes from the optimizer state, unscaled'),
    ('param_scheduler', "the schedulers' state keeps {old}"),
    ('randomness.seed', "the whole run follows the checkpoint's seed {old}, the data order included"),
)


def flatten(node: Any, prefix: str = '') -> Dict[str, Any]:
    """``{'a.b.0.c': value}`` of a config's nested dicts and lists (an empty one is a value)."""
    if not isinstance(node, (dict, list, tuple)) or not node and prefix:
        return {prefix[:-1]: node}
    items = node.items() if isinstance(node, dict) else enumerate(node)
    return {k: v for key, value in items for k, v in flatten(value, f'{prefix}{key}.').items()}


def resume_changes(saved_text: Optional[str], current: Config, notes=()) -> Tuple[List[str], Optional[str]]:
    """What ``current`` changes against the config ``saved_text`` (a ``pretty_text``; None: not saved) of the
    checkpoint, sorted as the module says: the refused changes (``'key old -> new (why)'``) and one warning of the
    others and of the runner's ``notes`` (None when there is nothing to say)."""
    try:
        saved = Config.fromstring(saved_text, file_format='.py') if isinstance(saved_text, str) else current
    except Exception as e:  # a config text that no longer parses (written by another mmengine or package version)
        return [], f"the checkpoint's config does not parse ({type(e).__name__}), so its changes cannot be listed"
    current = Config.fromstring(current.pretty_text, file_format='.py')  # both as pretty_text writes them
    old, new = flatten(saved.to_dict()), flatten(current.to_dict())
    refused, restored, taken = [], [], []
    for key in sorted(old.keys() | new.keys()):
        was, now = old.get(key, '<unset>'), new.get(key, '<unset>')
        if was == now or key.split('.')[0] in RUN_KEYS:
            continue
        change = f'{key} {was!r} -> {now!r}'
        by = next((what for prefix, what in RESTORED if key.startswith(prefix)), None)
        if key == 'optim_wrapper.optimizer.type' or key.startswith('param_scheduler') and key.endswith('.type'):
            refused.append(f'{change} (the state resumed for it belongs to {was!r})')
        elif by is not None:
            restored.append(f'{change} ({by.format(old=repr(was))})')
        else:
            taken.append(change)
    groups = (
        ('overridden by the resumed state', restored),
        ('taken from the new config (the training so far used the old value)', taken),
        ('the resumed weights', notes),
    )
    parts = [f'{title}: ' + '; '.join(group) for title, group in groups if group]
    if not parts:
        return refused, None
    count = f'the config differs from the checkpoint\'s in {len(restored) + len(taken)} settings; '
    return refused, (count if restored or taken else '') + ' | '.join(parts)
