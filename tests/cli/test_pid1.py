"""marun as a container's PID 1, for real: a new PID namespace (`unshare --pid --fork
--mount-proc`, needs root) in which `marun run` is process 1, as under Docker or Kubernetes.

PID 1 gets no default signal actions and inherits every orphan of the namespace; when it exits,
the kernel ends the namespace. The test checks what marun must do before that: relay SIGTERM to
its children, reap the orphan it adopted, exit with 128+15, and leave no process behind.
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
from test_supervisor import INIT, WORKER, alive, by_name, ready, result, signals_seen, wait_until

from conftest import clean_env

pytestmark = pytest.mark.e2e


def _unshare_works() -> str | None:
    """Why a PID namespace cannot be made here, or None."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"unshare --pid --fork --mount-proc fails here: {probe.stderr.strip()}"
    return None


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _descendants(pid: int) -> set[int]:
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def test_sigterm_to_marun_as_pid_1_stops_everything_and_leaves_nothing(tmp_path: Path) -> None:
    reason = _unshare_works()
    if reason:
        pytest.skip(reason)
    args = [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        sys.executable,
        "-m",
        "marun",
        "run",
        "--mode",
        "pytorch",
        "--nproc-per-node",
        "3",
        "--",
        str(WORKER),
        "0=orphan",
        "*=sleep",
        *INIT,
    ]
    env = clean_env({"W_DIR": str(tmp_path), "MARUN_GRACE_PERIOD": "20"})
    with open(tmp_path / "out", "w") as out:
        outer = subprocess.Popen(args, env=env, cwd=str(tmp_path), stdout=out, stderr=out)
    try:
        marun = wait_until(lambda: _children(outer.pid), "marun inside the namespace")[0]
        wait_until(lambda: ready(tmp_path, ["1", "2"]), "the sleeping ranks")
        orphan = wait_until(
            lambda: (
                (tmp_path / "orphan.0").exists() and json.loads((tmp_path / "orphan.0").read_text())
            ),
            "rank 0's orphaned grandchild",
        )
        assert orphan["ppid"] == 1  # adopted by marun, the namespace's init
        status = Path(f"/proc/{marun}/status").read_text()
        assert "\nNSpid:\t" in status and status.split("\nNSpid:\t")[1].split()[1] == "1"
        everyone = _descendants(marun)
        assert len(everyone) >= 3  # ranks 1 and 2, the orphan (rank 0 has exited)

        os.kill(marun, signal.SIGTERM)
        assert outer.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        outer.kill()
        outer.wait()
    output = (tmp_path / "out").read_text()
    assert not [pid for pid in everyone | {marun} if alive(pid)], output
    assert signals_seen(tmp_path, "1") == ["TERM"]
    assert signals_seen(tmp_path, "2") == ["TERM"]
    rec = result(tmp_path)
    assert rec["outcome"] == "interrupted"
    assert rec["exit_code"] == 143
    procs = by_name(rec)
    assert procs["rank0"]["exit_code"] == 0  # it exited before, leaving its child to marun
    for name in ("rank1", "rank2"):
        assert procs[name]["signal"] == "SIGTERM"
        assert procs[name]["stopped_by"] == "SIGTERM"
    # The orphan, still in rank 0's process group, was stopped with it and reaped by marun.
    assert rec["orphans_reaped"] == 1


def test_a_lone_process_is_supervised_not_execd_when_marun_is_pid_1(tmp_path: Path) -> None:
    """Exec'd as PID 1, a script without a SIGTERM handler would ignore `docker stop` (PID 1
    has no default signal actions) until SIGKILL. marun stays PID 1 and relays instead."""
    reason = _unshare_works()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "job.py"
    script.write_text("import os, time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(120)\n")
    args = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "marun", "run",
            "--mode", "pytorch", "--", str(script), *INIT]  # fmt: skip
    with open(tmp_path / "out", "w") as out:
        outer = subprocess.Popen(
            args, env=clean_env({"MARUN_GRACE_PERIOD": "20"}), cwd=str(tmp_path), stdout=out
        )
    try:
        marun = wait_until(lambda: _children(outer.pid), "marun inside the namespace")[0]
        child = wait_until(lambda: _children(marun), "the lone rank under marun")[0]
        # Read while the rank is inside execve, cmdline is empty (the new image's argument area
        # is not set yet): wait for the exec to finish rather than read that window.
        cmdline = wait_until(
            lambda: Path(f"/proc/{child}/cmdline").read_text(), "the rank's exec to finish"
        )
        assert "python" in cmdline
        wait_until(lambda: "pid" in (tmp_path / "out").read_text(), "the rank's first line")
        os.kill(marun, signal.SIGTERM)
        assert outer.wait(timeout=15) == 128 + signal.SIGTERM
    finally:
        outer.kill()
        outer.wait()
    assert not alive(child)
    assert "[0:0] pid 2" in (tmp_path / "out").read_text()  # prefixed: supervised, as PID 2
    assert result(tmp_path)["processes"][0]["stopped_by"] == "SIGTERM"
