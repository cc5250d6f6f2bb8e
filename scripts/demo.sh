#!/usr/bin/env bash
# marun's main job as a local demo: what a 2-node x 2-device job would start on every node,
# from exactly the variables and arguments the platform injects (a dry-run: nothing starts).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
bash scripts/bootstrap.sh >/dev/null
SCRIPT=examples/hello.py
[ -f "$SCRIPT" ] || { mkdir -p examples; printf 'import os\nprint(os.environ.get("RANK"))\n' > "$SCRIPT"; }
# What ModelArts sets on node 0 of a 2-node PyTorch-GPU job with 2 GPUs a node.
platform_env=(MA_NUM_HOSTS=2 MA_NUM_GPUS=2 VC_TASK_INDEX=0 MA_VJ_NAME=demo-job MA_TASK_NAME=worker)
echo "== PyTorch-GPU: the platform appends --init_method/--rank/--world_size =="
env "${platform_env[@]}" .venv/bin/marun plan --all-nodes --format table -- \
  "$SCRIPT" --epochs 1 --init_method tcp://127.0.0.1:29500 --rank 0 --world_size 2
echo
echo "== The same job as a MindSpore dynamic cluster (scheduler + workers) =="
env "${platform_env[@]}" VC_WORKER_HOSTS=127.0.0.1,127.0.0.2 .venv/bin/marun plan \
  --mode mindspore --all-nodes --format table -- "$SCRIPT" --epochs 1
