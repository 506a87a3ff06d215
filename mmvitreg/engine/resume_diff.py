"""What a resumed run changes against the run it resumes, in one warning.

mmengine stores the run's config in every checkpoint (``checkpoint['meta']['cfg']``, its ``pretty_text``) and
:meth:`~mmengine.runner.Runner.resume` restores the optimizer's and the schedulers' states, the seed and the loop
counters from the file, whatever the new config says. :func:`resume_changes` compares the two configs and sorts each
difference by what the resume does with it:

* *overridden by the resumed state*: the optimizer's settings (``optim_wrapper.optimizer.*``, ``paramwise_cfg``:
  the optimizer state's parameter groups carry lr, weight decay, betas, ...), the schedulers'
  (``param_scheduler``) and ``randomness.seed``;
* *cannot be honoured*: what changes the length of an epoch (the train data loader's batch size, sampler or data
  set) while the resume point stays at the checkpoint's iteration;
* *taken from the new config*: everything else (e.g. a backbone's ``drop_path_rate``), which the training so far
  did not use.
"""
from typing import Any, Dict, Optional

from mmengine.config import Config

#: settings that belong to the run, not to the training (they may differ on every resume)
RUN_KEYS = ('work_dir', 'load_from', 'resume', 'launcher', 'experiment_name', 'checkpoint_policy')
#: prefixes whose values the resumed state overrides, and what restores them
RESTORED = (('optim_wrapper.optimizer.', 'the optimizer state'), ('optim_wrapper.paramwise_cfg', 'the optimizer state'),
            ('param_scheduler', "the schedulers' state"), ('randomness.seed', "the checkpoint's seed"))
#: prefixes that change the length of an epoch
EPOCH_LENGTH = ('train_dataloader.batch_size', 'train_dataloader.sampler', 'train_dataloader.dataset')


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


def resume_changes(saved_text: str, current: Config, filename: str, resumed_iter: int, resumed_epoch: int,
                   epoch_length: Optional[int]) -> Optional[str]:
    """One line listing what ``current`` changes against the config ``saved_text`` of the checkpoint ``filename``,
    sorted as the module says, or None when nothing changed.

    Args:
        saved_text (str): ``checkpoint['meta']['cfg']`` (a config's ``pretty_text``).
        current (Config): The resumed run's config.
        filename (str): The checkpoint, as the line names it.
        resumed_iter (int): ``checkpoint['meta']['iter']``: where training goes on.
        resumed_epoch (int): ``checkpoint['meta']['epoch']``.
        epoch_length (int, optional): Iterations per epoch of the new train data loader (None: not known).
    """
    try:
        saved = Config.fromstring(saved_text, file_format='.py')
    except Exception as e:  # a config text that no longer parses (written by another mmengine or package version)
        return f'resume {filename}: the checkpoint\'s config does not parse ({type(e).__name__}), so what the new ' \
               'config changes cannot be listed'
    current = Config.fromstring(current.pretty_text, file_format='.py')  # both as pretty_text writes them
    old, new = flatten(saved.to_dict()), flatten(current.to_dict())
    restored, unhonoured, taken = [], [], []
    changed = sorted(k for k in old.keys() | new.keys()
                     if old.get(k, '<unset>') != new.get(k, '<unset>') and k.split('.')[0] not in RUN_KEYS)
    for key in changed:
        change = f'{key} {old.get(key, "<unset>")!r} -> {new.get(key, "<unset>")!r}'
        by = next((what for prefix, what in RESTORED if key.startswith(prefix)), None)
        if by is not None:
            restored.append(f'{change} ({by} keeps {old.get(key, "<unset>")!r})')
        elif key.startswith(EPOCH_LENGTH):
            unhonoured.append(change)
        else:
            taken.append(change)
    if not (restored or unhonoured or taken):
        return None
    parts = []
    if restored:
        parts.append('overridden by the resumed state: ' + '; '.join(restored))
    if unhonoured:
        before = resumed_iter // resumed_epoch if resumed_epoch else None
        length = (f'an epoch is now {epoch_length} iterations' + (f' (was {before})' if before else '')
                  if epoch_length is not None else 'the epoch length changes')
        parts.append(f'cannot be honoured: {"; ".join(unhonoured)} ({length}, and the resume point stays at '
                     f'iteration {resumed_iter}, epoch {resumed_epoch}: start a new run with load_from to train '
                     'with them)')
    if taken:
        parts.append('taken from the new config (the training so far used the old value): ' + '; '.join(taken))
    count = len(restored) + len(unhonoured) + len(taken)
    return f'resume {filename}: the config differs from the checkpoint\'s in {count} settings; ' + ' | '.join(parts)
