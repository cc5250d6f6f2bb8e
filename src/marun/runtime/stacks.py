"""Every running process's Python stacks, for the hang watchdog: `py-spy dump` per process
(the optional extra `marun[hang]` installs it), written into the process's log and returned for
the job's report.

py-spy takes up to `DUMP_TIMEOUT` seconds a process, so the dumps run in a thread of their own
(`StackDumps`), never in the supervisor's loop: the loop only notes which processes to dump (pid,
name, rank, a duplicate of its log's descriptor, which the thread owns and closes) and goes on
reaping and answering signals. Requests are taken one at a time, in order.

A process the plan gives no rank (MPI's mpi-leader and sshd: the ranks run below mpirun on node
0, below sshd and orted elsewhere) is a launcher: the Python processes below it are dumped too,
for those are the ranks the watchdog must judge (a busy, silent MPI job was judged hung on the
launchers' unchanging stacks alone)."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

MISSING = "py-spy is not installed: no stacks (pip install 'marun[hang]')"
DUMP_TIMEOUT = 10.0  # seconds one `py-spy dump` may take
MAX_BELOW = 64  # Python processes dumped below one launcher (ranks per node, with room)


def py_spy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else None


@dataclass(frozen=True)
class Target:
    """One process to dump: `log_fd` is the thread's own descriptor of its log (None: the
    stacks are a sample, not written into the log)."""

    pid: int
    name: str
    rank: int | None
    log_fd: int | None


def _dump_one(tool: str | None, pid: int) -> str:
    if tool is None:
        return MISSING
    try:
        done = subprocess.run(
            [tool, "dump", "--pid", str(pid)],
            capture_output=True,
            check=False,
            text=True,
            timeout=DUMP_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"py-spy dump failed: {exc}"
    return (done.stdout + done.stderr).strip()


def _is_python(pid: int) -> bool:
    """The process runs a Python interpreter (its executable's name: python3.11, ...)."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    except OSError:
        return False


def _dump_below(tool: str, target: Target) -> str:
    """The stacks of the Python processes below a launcher (MPI's ranks), each under a line
    naming it."""
    from marun.runtime.reaper import descendants

    below = [pid for pid in descendants(target.pid) if _is_python(pid)][:MAX_BELOW]
    return "".join(f"\n[below {target.name}: pid {pid}]\n{_dump_one(tool, pid)}" for pid in below)


def dump_stacks(targets: Sequence[Target]) -> str:
    """Every target's stacks, written into its log when it has one there (the descriptors are
    closed here)."""
    from marun._files import write_all

    tool = py_spy()
    parts: list[str] = []
    for target in targets:
        text = _dump_one(tool, target.pid)
        if target.rank is None and tool is not None:
            text += _dump_below(tool, target)
        if target.log_fd is not None:
            block = f"[marun] hang: stacks of {target.name} (pid {target.pid}):\n{text}\n"
            with contextlib.suppress(OSError, ValueError):
                write_all(target.log_fd, block.encode())
            with contextlib.suppress(OSError):
                os.close(target.log_fd)
        parts.append(f"{target.name} (rank {target.rank}, pid {target.pid}):\n{text}\n")
    return "".join(parts) or "(no running process)\n"


class StackDumps:
    """Dumps in one thread of their own, each request's text handed to `report` (the job link's
    `report_stacks`, which is safe from any thread)."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self._report = report
        self._requests: queue.SimpleQueue[list[Target] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def request(self, targets: list[Target]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="marun-stacks", daemon=True)
            self._thread.start()
        self._requests.put(targets)

    def close(self) -> None:
        """No more requests; a dump under way finishes on its own (the thread is a daemon)."""
        if self._thread is not None:
            self._requests.put(None)

    def _serve(self) -> None:
        while True:
            targets = self._requests.get()
            if targets is None:
                return
            self._report(dump_stacks(targets))
