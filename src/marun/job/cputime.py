"""CPU time used by this marun's ranks (every process below this one), for the hang watchdog:
a job whose ranks are silent but still use CPU is working, or spinning, not necessarily hung.
Read from /proc (Linux); None elsewhere."""

from __future__ import annotations

import os

from marun.runtime.reaper import stat_fields

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children)."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    try:
        ppid = int(fields[1])
        ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    except (IndexError, ValueError):
        return None
    return ppid, ticks / _TICKS


def descendants_cpu(root: int | None = None) -> float | None:
    """CPU seconds of every living descendant of `root` (this process), or None without
    /proc."""
    root = os.getpid() if root is None else root
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in pids:
        got = _stat(name)
        if got is not None:
            parent[int(name)], cpu[int(name)] = got
    below: set[int] = {root}
    total = 0.0
    changed = True
    while changed:  # the tree is shallow: a few passes
        changed = False
        for pid, ppid in parent.items():
            if ppid in below and pid not in below:
                below.add(pid)
                total += cpu[pid]
                changed = True
    return total
