#!/usr/bin/env bash
# marun's main job as a local demo: a 2-node x 2-device PyTorch-GPU job simulated on this
# machine. Each node is a real `marun run` given exactly what the platform injects (MA_*/VC_*
# variables and the appended --init_method/--rank/--world_size); the job's plan is printed
# first, then every rank's output. Needs no framework and no cluster.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
bash scripts/bootstrap.sh >/dev/null
exec .venv/bin/marun simulate --mode "${MODE:-pytorch}" --nodes 2 --devices 2 -- examples/hello.py "$@"
