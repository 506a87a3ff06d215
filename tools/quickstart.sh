#!/usr/bin/env bash
# The main job, from a fresh clone: set up the stack, build the bundled digits data, train the default config
# and evaluate it, then sum up what the run shows of mmvitreg.
#   bash tools/quickstart.sh [CONFIG]      (default: configs/demo/deit-tiny_1xb64-13e_drloc_digits.py)
# The default is DRLoc (dense relative localization, the technique made for small data sets) on the quick-start
# DeiT-tiny: the summary gives its top-1 and the loss term DRLoc adds, as logged at the first and the last
# iteration, and the command of the baseline without it.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
bash tools/setup_env.sh
VENV=$(bash tools/setup_env.sh --print-venv)
PY=$VENV/bin/python
CONFIG=${1:-configs/demo/deit-tiny_1xb64-13e_drloc_digits.py}
WORK=work_dirs/quickstart
# one intra-op thread: the two data-loading workers take the other core of a small machine, and
# OpenMP threads competing for busy cores slow a step down many times over
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
start=$SECONDS

"$PY" tools/dataset_converters/digits.py imagenet --out data
rm -rf "$WORK"  # the summary reads this run's logs only
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK"
"$PY" tools/test.py "$CONFIG" "$(cat "$WORK/last_checkpoint")" --work-dir "$WORK" | tee "$WORK/test.log"

# the summary: the mmvitreg components of the model, the test metrics, and every loss term of the training log at
# its first and last logged iteration (mmengine's json scalars)
"$PY" -W ignore - "$CONFIG" "$WORK" "$((SECONDS - start))" <<'EOF'
import json
import sys
from pathlib import Path

from mmengine.config import Config

config, work, seconds = sys.argv[1], Path(sys.argv[2]), sys.argv[3]


def components(node):
    """The mmvitreg types named anywhere in a config dict, in order."""
    if isinstance(node, dict):
        found = [node['type']] if str(node.get('type', '')).startswith('mmvitreg.') else []
        return found + [name for value in node.values() for name in components(value)]
    if isinstance(node, (list, tuple)):
        return [name for value in node for name in components(value)]
    return []


model = Config.fromfile(config).model
names = list(dict.fromkeys(components(model.to_dict())))
metrics = json.loads([ln for ln in (work / 'test.log').read_text().splitlines() if ln.startswith('metrics: ')][-1][9:])
train_log = next(p for p in sorted(work.glob('*/vis_data/scalars.json')) if '"loss"' in p.read_text())
rows = [json.loads(ln) for ln in train_log.read_text().splitlines() if '"loss"' in ln]
terms = [key for key in rows[0] if key.startswith('loss_')]
print('=' * 30 + ' quick start ' + '=' * 30)
print(f'config     {config}')
print(f'mmvitreg   {", ".join(names) if names else "none: a plain config"}')
for key, value in metrics.items():
    print(f'test       {key} {value:.2f}' + ('  (chance: 10.00 for 10 digits)' if key == 'accuracy/top1' else ''))
for key in terms:
    print(f'logged     {key} {rows[0][key]:.4f} at iteration {rows[0]["step"]} -> {rows[-1][key]:.4f} at '
          f'{rows[-1]["step"]}' + ('' if key == 'loss_cls' else '  (added to `loss` by mmvitreg)'))
if model.get('aux_losses'):
    print(f'baseline   the same run without it: python tools/train.py {config} --cfg-options model.aux_losses=[]')
print(f'time       {seconds} s: data, training and test, after set-up')
print('=' * 73)
EOF
