"""The hang watchdog's dumps below a launcher (marun.runtime.stacks): MPI's ranks run below
mpirun (node 0) or sshd and orted (the other nodes), not as marun's children. Real processes:
a Python launcher, a shell below it, a Python "rank" below that."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from marun.runtime.reaper import descendants
from marun.runtime.stacks import Target, _dump_below, _is_python, py_spy

TREE = """\
import subprocess, sys, time
rank = subprocess.Popen(["sh", "-c", sys.executable + ' -c "import time; time.sleep(60)"; :'])
print(rank.pid, flush=True)
time.sleep(60)
"""


def _real_python() -> str:
    """An interpreter binary (a pyenv shim is a shell script)."""
    return os.path.realpath(sys.executable)


def test_the_python_processes_below_a_launcher_are_found_through_a_shell(tmp_path: Path) -> None:
    launcher = subprocess.Popen(
        [_real_python(), "-c", TREE], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    below: list[int] = []
    try:
        assert launcher.stdout is not None
        shell = int(launcher.stdout.readline())
        deadline = time.monotonic() + 30
        # Until the shell has started the "rank": its child is there AND has exec'd Python
        # (between the shell's fork and its exec the child is still the shell: under load the
        # test saw it there once, and took it for the rank).
        while time.monotonic() < deadline:
            below = descendants(launcher.pid)
            if len(below) >= 2 and _is_python(below[1]):
                break
            time.sleep(0.05)
        assert below[0] == shell, below  # each before its children
        rank = below[1]
        assert not _is_python(shell) and _is_python(rank) and _is_python(launcher.pid)
        if py_spy() is not None:  # marun[hang] in this venv: the rank's own stacks
            text = _dump_below(str(py_spy()), Target(launcher.pid, "mpi-leader", None, None))
            assert f"[below mpi-leader: pid {rank}]" in text, text
            assert text.count("[below mpi-leader:") == 1, text  # the shell is skipped
            assert "time.sleep" in text or "<module>" in text, text
    finally:
        launcher.kill()
        launcher.wait(timeout=30)
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
