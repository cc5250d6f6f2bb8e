"""Hot spares in MPI mode (part 23), on the network-namespace cluster of test_mpi_cluster.py
(real sshd, mpirun, orted and mpi4py ranks, marun as each host's PID 1). The platform starts
2 + 1 hosts with `--spares 1`: mpirun on host 0 runs 2 ranks on host 0 and 2 on host 1; host 2
waits (its marun runs nothing, not even sshd). Once every rank of round 0 runs, host 1's pod is
gone: every process on it SIGKILLed (its connection closes without a goodbye), or SIGTERM to its
marun (the platform's deletion: it stops sshd, its orted and ranks go with it, and it leaves its
place). Round 1: host 2 takes place 1, its marun starts place 1's sshd, node 0's hostfile names
host 2 on place 1's line, and mpirun runs ranks 2 and 3 there; the allreduce of round 1 sums
every rank's.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import test_mpi_cluster as mpi

pytestmark = pytest.mark.e2e

workdir = mpi.workdir
make_cluster = mpi.make_cluster
mpi_python = mpi.mpi_python

# Round 0: every rank says where it runs, then works (sleeps) until its host is lost; round 1:
# the allreduce.
ROUNDS = """\
import os, socket, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
round_ = os.environ.get("MARUN_RESTART_COUNT")
comm.Barrier()
print(f"rank {rank}/{size} round {round_} on {socket.gethostname()}", flush=True)
if round_ == "0":
    time.sleep(600)
total = comm.allreduce(rank + 1)
print(f"rank {rank}/{size} round {round_}: allreduce sum {total} "
      f"(expected {size * (size + 1) // 2})", flush=True)
"""


@pytest.mark.parametrize("deletion", ["sigkill", "sigterm"])
def test_a_spare_takes_a_lost_hosts_place_in_the_hostfile(
    make_cluster: mpi.MakeCluster, mpi_python: Path, tmp_path: Path, deletion: str
) -> None:
    cluster = make_cluster(3)
    script = tmp_path / "rounds.py"
    script.write_text(ROUNDS)
    job = mpi.MpiJob(
        cluster,
        mpi.volcano_ssh_secret(tmp_path / "ssh", 0o600),
        mpi_python,
        env={"MARUN_MAX_RESTARTS": "2", "MARUN_SPARES": "1"},
    )
    job.start(script, hosts=range(3))
    size = 2 * mpi.GPUS
    job.wait_for(0, rf"rank \d+/{size} round 0 on ", size)
    assert not cluster.listening(2, 36666), "a spare runs nothing while it waits: " + job.report()
    if deletion == "sigkill":
        cluster.kill_host(1)  # its pod gone: marun, sshd, orted and ranks SIGKILLed
    else:
        os.killpg(job.nodes[1].proc.pid, signal.SIGTERM)  # reaches marun, PID 1 of host 1
    codes = job.finish()
    assert (codes[0], codes[2]) == (0, 0) and codes[1] != 0, job.report()
    if deletion == "sigterm":
        assert codes[1] == 143, job.report()  # it left its place: its own 128+15

    out = job.nodes[0].output  # mpirun's --tag-output lines reach node 0's console
    where = dict(re.findall(rf"rank (\d+)/{size} round 1 on (\S+)\n", out))
    expected = {str(r): cluster.name(0 if r < mpi.GPUS else 2) for r in range(size)}
    assert where == expected, job.report()
    sums = re.findall(r"rank \d+/\d+ round 1: allreduce sum (\d+) \(expected (\d+)\)", out)
    assert len(sums) == size and all(a == b for a, b in sums), job.report()
    why = {
        "sigkill": r"its marun's connection closed without a goodbye.*",
        "sigterm": r"its marun was stopped by SIGTERM \(its pod deleted\)",
    }[deletion]
    said = re.compile(
        rf"marun: node 1 \(\S+\) lost \({why}\); spare node 2 \(\S+\) takes its place in round 1"
    )
    assert said.search(out) and said.search(job.nodes[2].output), job.report()
    assert "marun: hostfile: place 1 is on " in out, job.report()

    report = job.job_json()
    assert report["exit_code"] == 0, report
    (round_1,) = report["rounds"]
    subs = [(s["place"], s["lost"], s["spare"]) for s in round_1["substitutions"]]
    assert subs == [(1, 1, 2)], report
    job.assert_nothing_left()
