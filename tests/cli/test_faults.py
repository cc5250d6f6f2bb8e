"""Faults around the job, for real: a log path with a planted symlink, marun itself SIGKILLed, a
disk that fills up mid-run, several nodes sharing one log directory.

Each ends the way the README promises: bad input is one line and exit 2 before anything starts;
otherwise the job's own exit code, a warning, and nothing left behind or overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_supervisor import INIT, alive, wait_until

from conftest import clean_env, run_marun

MARUN = [sys.executable, "-m", "marun"]
SLEEPER = """\
import os, time
path = os.path.join(os.environ["F_DIR"], "pid." + os.environ["RANK"])
open(path + ".part", "w").write(str(os.getpid()))
os.replace(path + ".part", path)  # whole or absent: never an empty pid file
time.sleep(300)
"""


def test_a_symlink_where_a_log_goes_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('ran')\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    logs = tmp_path / "marun_logs"
    logs.mkdir()
    (logs / "rank_1.log").symlink_to(victim)
    res = run_marun(
        ["run", "--mode", "pytorch", "--nproc-per-node", "2", "--", "train.py", *INIT],
        cwd=tmp_path,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "rank_1.log" in res.stderr, res.stderr
    assert "ran" not in res.stdout  # nothing started
    assert victim.read_text() == "precious\n"
    assert victim.stat().st_mode & 0o777 == 0o644


def test_ranks_end_when_marun_is_sigkilled(tmp_path: Path) -> None:
    """A SIGKILL cannot be relayed; the kernel's parent-death signal ends the ranks instead."""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    with open(tmp_path / "out", "w") as out:
        proc = subprocess.Popen(
            [
                *MARUN,
                "run",
                "--mode",
                "pytorch",
                "--nproc-per-node",
                "3",
                "--",
                "sleeper.py",
                *INIT,
            ],
            env=clean_env({"F_DIR": str(tmp_path)}),
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        pids = wait_until(
            lambda: (
                [int((tmp_path / f"pid.{r}").read_text()) for r in range(3)]
                if all((tmp_path / f"pid.{r}").exists() for r in range(3))
                else None
            ),
            "the ranks",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until(lambda: not any(alive(p) for p in pids), "the ranks to end", limit=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.e2e
def test_a_disk_that_fills_up_mid_run_keeps_the_jobs_exit_code(tmp_path: Path) -> None:
    """The log directory is a 256 KiB tmpfs (a private mount namespace, as root); the rank
    writes 2 MB and exits 0. marun exits 0, warns once for the log it could not finish, and the
    console still shows the rank's last line."""
    if os.getuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private tmpfs")
    (tmp_path / "writer.py").write_text(
        "import sys\nfor i in range(20000):\n    print(f'line {i:05d} ' + 'x' * 90)\n"
        "print('the last line', flush=True)\n"
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    script = f'mount -t tmpfs -o size=256k marun-test-full "{logs}" && exec "$@"'
    res = subprocess.run(
        [
            *("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"),
            *(*MARUN, "run", "--mode", "pytorch", "--supervise", "--log-dir", str(logs)),
            *("--", "writer.py", *INIT),
        ],
        env=clean_env({"MARUN_LOG_FORMAT": "json"}),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    events = [json.loads(line) for line in res.stderr.splitlines() if line.startswith("{")]
    warned = [e for e in events if e["event"] == "log_not_written"]
    assert len(warned) == 1, res.stderr[-3000:]
    assert warned[0]["error"] == "No space left on device"
    assert "[0:0] the last line" in res.stdout


def test_nodes_sharing_a_log_directory_keep_their_own_record(tmp_path: Path) -> None:
    """Node 0 and node 1 of one job, one shared log directory: result.json (node 0) and
    result.node1.json (node 1), neither overwriting the other."""
    (tmp_path / "train.py").write_text("print('ok')\n")
    shared = tmp_path / "shared_logs"
    codes = {}
    for node in (0, 1):
        res = run_marun(
            [
                *("run", "--mode", "pytorch", "--supervise", "--log-dir", str(shared)),
                *("--", "train.py", "--init_method", "tcp://127.0.0.1:29599"),
                *("--rank", str(node), "--world_size", "2"),
            ],
            env={"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": str(node), "MARUN_JOB_PORT": "0"},
            cwd=tmp_path,
        )
        codes[node] = res.returncode
        assert res.returncode == 0, res.stderr
    first = json.loads((shared / "result.json").read_text())
    second = json.loads((shared / "result.node1.json").read_text())
    assert (first["node"], second["node"]) == (0, 1)


@pytest.mark.parametrize(
    ("mode", "args", "env"),
    [
        ("pytorch", ["--nproc-per-node", "2", "--", "train.py", "--init_method"], {}),
        ("mindspore", ["--nproc-per-node", "2", "--nic", "lo", "--", "train.py"], {}),
    ],
)
def test_a_taken_rendezvous_or_scheduler_port_is_refused_before_anything_starts(
    tmp_path: Path, mode: str, args: list[str], env: dict[str, str]
) -> None:
    """Another job's scheduler (or a leftover rank) holds the port: one line, exit 2, nothing
    started, instead of the framework's 'address already in use' or a rendezvous time-out."""
    import socket

    (tmp_path / "train.py").write_text("print('started')\n")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        if mode == "pytorch":
            args = [*args, f"tcp://127.0.0.1:{port}"]
        else:
            env = {"MARUN_MS_SCHED_PORT": str(port), "MA_CURRENT_IP": "127.0.0.1"}
        res = run_marun(["run", "--mode", mode, *args], env=env, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and f"port {port} " in res.stderr, res.stderr
    assert "started" not in res.stdout
