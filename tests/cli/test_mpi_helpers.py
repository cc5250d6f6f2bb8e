"""The pieces of MPI mode's leader and follower: the leader's reading of mpirun's report and of
its own hostfile, the ssh options it is given, and the follower run for real (a subprocess
waiting on a real watch port, told the job's status by a real `notify`, giving up on a node 0
that goes silent). The whole flow across hosts is in tests/e2e/test_mpi_cluster.py."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import clean_env
from marun.mpi.leader import FailureScanner, read_hostfile, write_hostfile
from marun.mpi.planner import mpirun_ssh_options, plm_rsh_args

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


# -- mpi_follower, for real ---------------------------------------------------------------------


def _follower(run_dir: Path, port: int, formation: float, peer: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "marun.mpi.follower", "wait", "--run-dir", str(run_dir)),
            *("--leader", "127.0.0.1", "--watch-port", str(port)),
            *("--formation-timeout", str(formation), "--peer-timeout", str(peer)),
        ],
        env=clean_env(),
        stderr=subprocess.PIPE,
        text=True,
    )


def _notify(run_dir: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"MARUN_NODE_RUN_DIR": str(run_dir)} if run_dir else {}
    return subprocess.run(
        [sys.executable, "-m", "marun.mpi.follower", "notify", *args],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _wait_for_line(proc: subprocess.Popen[str], words: str) -> list[str]:
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if words in line:
            return seen
    raise AssertionError(f"the follower ended without saying {words!r}: {seen}")


@pytest.fixture
def watch_port() -> Iterator[tuple[socket.socket, int]]:
    """node 0's watch port, as the leader listens on it."""
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock, sock.getsockname()[1]
    sock.close()


def test_notify_writes_the_status_where_sshd_says(tmp_path: Path) -> None:
    res = _notify(tmp_path, "--status", "3", "--reason", "rank 3 exited with code 3 first")
    assert res.returncode == 0, res.stderr
    data = json.loads((tmp_path / "job-status").read_text())
    assert data == {"status": 3, "reason": "rank 3 exited with code 3 first"}
    assert (tmp_path / "job-status").stat().st_mode & 0o777 == 0o600
    refused = _notify(None, "--status", "0")
    assert refused.returncode == 2
    assert "MARUN_NODE_RUN_DIR=None: expected this node's run directory" in refused.stderr


def test_follower_exits_with_the_status_node_0_reports(
    tmp_path: Path, watch_port: tuple[socket.socket, int]
) -> None:
    (tmp_path / "job-status").write_text('{"status": 7, "reason": "an earlier start"}')
    follower = _follower(tmp_path, watch_port[1], 30, 30)
    _wait_for_line(follower, "node 0 127.0.0.1 is up")
    assert _notify(tmp_path, "--status", "3", "--reason", "rank 3 failed").returncode == 0
    assert follower.wait(timeout=30) == 3  # not the stale 7
    assert follower.stderr is not None
    assert "reports the job failed with status 3: rank 3 failed" in follower.stderr.read()
    follower.stderr.close()


def test_follower_gives_up_on_a_node_0_that_goes_silent(
    tmp_path: Path, watch_port: tuple[socket.socket, int]
) -> None:
    sock, port = watch_port
    follower = _follower(tmp_path, port, 30, 1)
    _wait_for_line(follower, "is up")
    sock.close()  # node 0 is gone without a word
    assert follower.wait(timeout=60) == 1
    assert follower.stderr is not None
    said = follower.stderr.read()
    follower.stderr.close()
    assert "node 0 127.0.0.1 has not answered for 1s (peer_timeout; last: port" in said
    assert "closed (connection refused)) and did not report the job's status: giving up" in said


def test_follower_gives_up_on_a_node_0_that_never_came(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    follower = _follower(tmp_path, port, 0.5, 0.5)
    assert follower.wait(timeout=60) == 1
    assert follower.stderr is not None
    said = follower.stderr.read()
    follower.stderr.close()
    assert "node 0 127.0.0.1 never answered within 1s (formation_timeout + peer_timeout" in said


def test_follower_stops_on_sigterm(tmp_path: Path, watch_port: tuple[socket.socket, int]) -> None:
    follower = _follower(tmp_path, watch_port[1], 30, 30)
    _wait_for_line(follower, "is up")
    follower.send_signal(signal.SIGTERM)
    assert follower.wait(timeout=30) == 128 + signal.SIGTERM
    assert follower.stderr is not None
    assert "stopped by SIGTERM while waiting for node 0" in follower.stderr.read()
    follower.stderr.close()
