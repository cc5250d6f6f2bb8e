#!/usr/bin/env bash
# marun's main job as a local demo: a 2-node x 2-device PyTorch-GPU job simulated on this
# machine. Each node is a real `marun run` given exactly what the platform injects (MA_*/VC_*
# variables and the appended --init_method/--rank/--world_size); what the platform injects and what
# marun makes of it (the variables every rank gets, then per rank the ones that differ) come
# first, then every rank's output, in 30 lines. Needs no framework and no cluster.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
echo "[demo] setting up (.venv with marun: about a minute the first time, a pip install; seconds after)"
bash scripts/bootstrap.sh
mode=${MODE:-pytorch}
echo "[demo] marun simulate --mode $mode --nodes 2 --devices 2 -- examples/hello.py"
status=0
.venv/bin/marun simulate --mode "$mode" --nodes 2 --devices 2 -- examples/hello.py "$@" || status=$?
if [ "$status" = 0 ]; then
  echo "[demo] done: the simulated job exited 0; every rank's log is under marun_logs/simulate/node<i>/"
else
  echo "[demo] the simulated job exited $status (see the failure summary above)"
fi
exit "$status"
