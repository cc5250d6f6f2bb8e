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
        if entry.isdigit():
            got = _stat_of(int(entry))
            if got is not None:  # else gone meanwhile
                yield int(entry), got[0], got[1]


def _proc_is_ours() -> bool:
    """/proc exists and numbers processes as we do (a PID namespace entered without its own
    /proc mount shows the outer numbers)."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def live_groups(pgids: Iterable[int]) -> set[int]:
    """Which of these process groups still have a member (a zombie counts, as /proc shows it).
    One signal 0 per group, not a walk of /proc: the walk reads every process's stat (about 32
    us each here), and a round's stop asks this on every wake-up of every marun; a simulated
    job of 512 maruns in one PID namespace spent its CPU walking 1,100 processes."""
    alive: set[int] = set()
    for pgid in set(pgids):
        if pgid <= 1:
            continue  # 0 is our own group to killpg, 1 init's: neither is a group marun made
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass  # it has a member, one marun may not signal (the walk counted it too)
        alive.add(pgid)
    return alive


def direct_children() -> list[tuple[int, int]]:
    """(pid, pgid) of marun's own children as /proc sees them, adopted orphans included (none
    without a usable /proc: then only the processes marun started are known). Read from each
    thread's list of children where the kernel keeps one (an orphan is adopted by a thread of
    the subreaper), else from a walk of /proc."""
    if not _proc_is_ours():
        return []
    me = os.getpid()
    listed = _listed_children()
    if listed is None:
        return [(pid, pgid) for pid, ppid, pgid in _proc_stats() if ppid == me]
    out = []
    for pid in sorted(listed):
        got = _stat_of(pid)
        if got is not None and got[0] == me:  # still ours: not gone and its number taken again
            out.append((pid, got[1]))
    return out


def _listed_children() -> set[int] | None:
    """The children of this process's threads from /proc/self/task/*/children, or None where
    the kernel has no such file (built without CONFIG_PROC_CHILDREN). A list read while a child
    comes or goes may miss one: every caller asks again within a tick, while children are left."""
    me = str(os.getpid())
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    found: set[int] = set()
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as fh:
                found.update(int(p) for p in fh.read().split())
        except (OSError, ValueError):
            if tid == me:  # the main thread runs this marun: its list is missing, not gone
                return None
            continue  # another thread ended meanwhile
    return found


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (the process's state first), or None
    when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(b")") + 2 :].split()


def _stat_of(pid: int) -> tuple[int, int] | None:
    """(ppid, pgid) of one process, or None when it is gone."""
    fields = stat_fields(pid)
    if fields is None or len(fields) < 3:
        return None
    return int(fields[1]), int(fields[2])


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
