"""A restart round in MPI mode (issue 20), on the network-namespace cluster of
test_mpi_cluster.py (real sshd, mpirun, orted and mpi4py ranks, marun as each host's PID 1): an
allreduce whose rank 3 (on host 1) exits 3 in round 0 only, which it knows from
MARUN_RESTART_COUNT (forwarded to every rank, remote ones too). mpirun ends with 3, node 0 starts
round 1 (sshd stays up on every host, node 0 runs mpirun again), the allreduce succeeds, and
every node exits 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import test_mpi_cluster as mpi

pytestmark = pytest.mark.e2e

# The fixtures of test_mpi_cluster.py (a cluster factory, the mpi4py venv's interpreter).
workdir = mpi.workdir
make_cluster = mpi.make_cluster
mpi_python = mpi.mpi_python

FAILS_ONCE = """\
import os
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
round_, budget = os.environ.get("MARUN_RESTART_COUNT"), os.environ.get("MARUN_MAX_RESTARTS")
print(f"rank {rank}/{size} round {round_} MARUN_MAX_RESTARTS={budget}", flush=True)
if rank == 3 and round_ == "0":
    print("rank 3 exits with 3 in round 0", flush=True)
    os._exit(3)  # not sys.exit: MPI_Finalize would wait for the others
total = comm.allreduce(rank + 1)
print(f"rank {rank}/{size} round {round_}: allreduce sum {total} "
      f"(expected {size * (size + 1) // 2})", flush=True)
"""


def test_allreduce_fails_once_then_succeeds(
    make_cluster: mpi.MakeCluster, mpi_python: Path, tmp_path: Path
) -> None:
    cluster = make_cluster(2)
    script = tmp_path / "fails_once.py"
    script.write_text(FAILS_ONCE)
    job = mpi.MpiJob(
        cluster,
        mpi.volcano_ssh_secret(tmp_path / "ssh", 0o600),
        mpi_python,
        env={"MARUN_MAX_RESTARTS": "2"},
    )
    job.start(script, hosts=range(2))
    codes = job.finish()
    assert codes == {0: 0, 1: 0}, job.report()

    out = job.nodes[0].output  # mpirun's --tag-output lines reach node 0's console
    size = 2 * mpi.GPUS
    starts = re.findall(r"rank (\d+)/\d+ round (\S+) MARUN_MAX_RESTARTS=(\S+)\n", out)
    assert sorted(starts) == sorted([(str(r), k, "2") for r in range(size) for k in ("0", "1")]), (
        job.report()
    )
    assert "rank 3 exits with 3 in round 0" in out, job.report()
    sums = re.findall(r"rank (\d+)/\d+ round (\S+): allreduce sum (\d+) \(expected (\d+)\)", out)
    expected = str(size * (size + 1) // 2)
    assert sorted(sums) == [(str(r), "1", expected, expected) for r in range(size)], job.report()
    assert re.search(r"marun: round 1/2 after .*exit 3", out), job.report()

    report = job.job_json()
    assert report["exit_code"] == 0 and report["first_failure"] is None, report
    rounds = report["rounds"]
    assert [r["round"] for r in rounds] == [1], report
    assert (rounds[0]["cause"]["node"], rounds[0]["cause"]["exit_code"]) == (0, 3), rounds

    # mpirun's log on node 0 holds both rounds, the marker between them.
    log_dir = cluster.host_dir(0) / "job" / "marun_logs"
    result = json.loads((log_dir / "result.json").read_text())
    (leader,) = [p for p in result["processes"] if p["name"] == "mpi-leader"]
    text = Path(leader["log"]).read_text(errors="replace")
    before, marker, after = text.partition("marun: round 1/2 after ")
    assert marker and "round 0 " in before and "round 1: allreduce sum" in after, text[-3000:]
    job.assert_nothing_left()
