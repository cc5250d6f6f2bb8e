"""The pieces of MPI mode's leader: its reading of mpirun's report and of its own hostfile, and
the ssh options it is given. The whole flow across hosts (the other nodes ending with the job by
its coordination) is in tests/e2e/test_mpi_cluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from marun.mpi.leader import FailureScanner, read_hostfile, write_hostfile
from marun.mpi.mpirun_command import mpirun_ssh_options, plm_rsh_args

# -- what mpirun says about the first failure ----------------------------------------------------

EXIT_REPORT = b"""\
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[24125,1],3]
  Exit code:    3
--------------------------------------------------------------------------
"""
SIGNAL_REPORT = (
    b"mpirun noticed that process rank 2 with PID 0 on node ma-job-worker-1 exited on "
    b"signal 9 (Killed).\n"
)

SCANNED = [
    pytest.param([EXIT_REPORT], "rank 3 exited with code 3 first", id="exit-code"),
    pytest.param(
        [EXIT_REPORT[:400], EXIT_REPORT[400:]], "rank 3 exited with code 3 first", id="in-chunks"
    ),
    pytest.param(
        [SIGNAL_REPORT], "rank 2 on ma-job-worker-1 was ended by signal 9 (Killed) first", id="sig"
    ),
    pytest.param(
        [b"[1,0]<stderr>:  Process name: [[1,1],5]\n[1,0]<stderr>:  Exit code: 9\n"],
        None,
        id="a-rank-printing-the-same-words",
    ),
    pytest.param([b"Traceback (most recent call last):\n"], None, id="nothing"),
]


@pytest.mark.parametrize(("chunks", "expected"), SCANNED)
def test_failure_scanner(chunks: list[bytes], expected: str | None) -> None:
    scanner = FailureScanner()
    for chunk in chunks:
        scanner.feed(chunk)
    assert scanner.first == expected


def test_the_leaders_ssh_options_are_the_ones_mpirun_uses() -> None:
    """marun's own options as one string for mpirun, word for word for the leader; a
    `plm_rsh_args` in mpirun_extra_args (the last one wins, as in Open MPI) replaces them."""
    ours = ("-p", "36666", "-i", "/run/id_rsa", "-o", "BatchMode=yes")
    assert plm_rsh_args(ours) == "-p 36666 -i /run/id_rsa -o BatchMode=yes"
    assert mpirun_ssh_options((), ours) == ours
    extra = ("--mca", "plm_rsh_args", "-p 1", "-mca", "plm_rsh_args", "-p  2 -q", "-x", "A")
    assert mpirun_ssh_options(extra, ours) == ("-p", "2", "-q")


def test_hostfile_is_rewritten_with_addresses(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_text("# planned\nw0.job slots=2\n\nw1.job slots=2 max_slots=4  # note\n")
    entries = read_hostfile(str(path))
    assert entries == [("w0.job", "slots=2"), ("w1.job", "slots=2 max_slots=4")]
    write_hostfile(str(path), [("10.0.0.1", "slots=2"), ("10.0.0.2", "slots=2 max_slots=4")])
    assert path.read_text() == "10.0.0.1 slots=2\n10.0.0.2 slots=2 max_slots=4\n"
