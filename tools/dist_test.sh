#!/usr/bin/env bash
# Distributed testing: bash tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES [test.py args, e.g. --tta]
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
NPROC=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
TOOLS=$(cd "$(dirname "$0")" && pwd)

PYTHONPATH="$TOOLS/..${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python}" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$NPROC" --master_port="$PORT" \
    "$TOOLS/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "${@:4}"
