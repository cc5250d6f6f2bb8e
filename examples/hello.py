"""A start file with no framework: print what marun handed this process, then exit.

Run it through marun on a laptop to see the plan come alive (after `pip install .`):

    marun simulate --mode pytorch --nodes 2 --devices 2 -- examples/hello.py

Each process prints one line with its host, pid and every rank variable it was given.
"""

from __future__ import annotations

import os
import socket

# The names each engine's launcher sets: torchrun, MindSpore (msrun / dynamic cluster), the
# Ascend rank-table launch, TensorFlow and Open MPI.
RANK_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "MS_ROLE",
    "MS_NODE_ID",
    "MS_WORKER_NUM",
    "MS_SCHED_HOST",
    "MS_SCHED_PORT",
    "RANK_ID",
    "RANK_SIZE",
    "DEVICE_ID",
    "ASCEND_DEVICE_ID",
    "RANK_TABLE_FILE",
    "TF_CONFIG",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
)


def main() -> None:
    seen = " ".join(f"{name}={os.environ[name]}" for name in RANK_VARS if name in os.environ)
    print(f"hello from {socket.gethostname()} pid {os.getpid()}: {seen or '(no rank variables)'}")


if __name__ == "__main__":
    main()
