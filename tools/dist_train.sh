#!/usr/bin/env bash
# Distributed training: bash tools/dist_train.sh CONFIG NUM_PROCESSES [train.py args...]
# One process per GPU with NCCL where GPUs exist; on a CPU-only machine the processes use gloo
# (mmvitreg.utils.set_run_args). Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT. Interpreter: $PYTHON.
set -euo pipefail
CONFIG=$1
NPROC=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
TOOLS=$(cd "$(dirname "$0")" && pwd)

PYTHONPATH="$TOOLS/..${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python}" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$NPROC" --master_port="$PORT" \
    "$TOOLS/train.py" "$CONFIG" --launcher pytorch "${@:3}"
