"""MPI start file: one mpi4py allreduce across every rank of the job.

mpirun starts it on every host; each rank prints its host name and the sum of all ranks' values,
which must equal size * (size + 1) / 2 on every rank.

On the platform the start command is `marun run --mode mpi -- mpi_allreduce.py`. Here, as root,
with mpi4py importable by marun's interpreter (`bash scripts/frameworks.sh mpi`; docs/mpi.md):

    .cache/venvs/mpi/bin/marun simulate --mode mpi --nodes 3 --devices 2 \
        -- examples/mpi_allreduce.py
"""

from __future__ import annotations

import socket


def main() -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    print(
        f"rank {rank}/{size} on {socket.gethostname()}: allreduce sum {total} "
        f"(expected {size * (size + 1) // 2})",
        flush=True,
    )


if __name__ == "__main__":
    main()
