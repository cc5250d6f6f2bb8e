"""What an init owes the processes under it: adopt orphans, reap every zombie, and find and
signal whatever is left at the end.

marun is often the container's PID 1; elsewhere it asks Linux to make it a child subreaper
(`PR_SET_CHILD_SUBREAPER`), so that in both cases an orphaned grandchild becomes marun's child and
marun's `waitpid(-1)` collects it. A zombie then never outlives the process that made it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from marun.exit_codes import signal_exit

_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux >= 3.4); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class Ending:
    """How a process ended: `code` is what a shell reports (128+N for signal N)."""

    code: int
    signal: int | None = None

    @classmethod
    def from_wait_status(cls, status: int) -> Ending:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            return cls(signal_exit(sig), sig)
        return cls(os.WEXITSTATUS(status))


def reap() -> tuple[list[tuple[int, Ending]], bool]:
    """Collect every child that has ended; also say whether any child is left at all."""
    ended: list[tuple[int, Ending]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended, False
        if pid == 0:
            return ended, True
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            ended.append((pid, Ending.from_wait_status(status)))


def signal_group(pgid: int, signum: int) -> bool:
    """Signal a process group; False when it no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        # A group we cannot signal is not ours any more (its id was reused): leave it alone.
        return False
    return True


def _proc_stats() -> Iterable[tuple[int, int, int]]:
    """(pid, ppid, pgid) of every process visible in /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # gone meanwhile
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 3:
            yield int(entry), int(fields[1]), int(fields[2])


def _proc_is_ours() -> bool:
    """/proc exists and numbers processes as we do (a PID namespace entered without its own
    /proc mount shows the outer numbers)."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def live_groups(pgids: Iterable[int]) -> set[int]:
    """Which of these process groups still have a member. Without a usable /proc all of them are
    assumed alive: signalling a group that has just emptied is harmless."""
    wanted = set(pgids)
    if not wanted or not _proc_is_ours():
        return wanted
    return {pgid for _, _, pgid in _proc_stats() if pgid in wanted}


def direct_children() -> list[tuple[int, int]]:
    """(pid, pgid) of marun's own children as /proc sees them, adopted orphans included (none
    without a usable /proc: then only the processes marun started are known)."""
    if not _proc_is_ours():
        return []
    me = os.getpid()
    return [(pid, pgid) for pid, ppid, pgid in _proc_stats() if ppid == me]


def descendants(root: int) -> list[int]:
    """Every living process below `root` as /proc sees it, each before its children ([]
    without a usable /proc)."""
    if not _proc_is_ours():
        return []
    children: dict[int, list[int]] = {}
    for pid, ppid, _ in _proc_stats():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found
