"""Sending the node's machine's signals (marun.runtime.node_machine decides which, and when):
to every process group marun started that still has a member, to the round's, to adopted
orphans (a daemon that made its own session), or a signal passed on. Functions of the shell's
state (marun.runtime.node_state), called by marun.runtime.supervisor."""

from __future__ import annotations

import contextlib
import os
import signal

from marun.runtime.node_state import NodeState
from marun.runtime.reaper import direct_children, live_groups, signal_group

DRAIN_WAIT = 10.0  # at the end, how long the relay may go without moving a byte (stuck)
TAIL_WAIT = 1.0  # how long a failure waits for the rest of its process's output (its tail)


def signal_everything(st: NodeState, signum: int) -> None:
    """Signal every process group marun started that still has a member, then any adopted
    orphan outside those groups (a daemon that made its own session)."""
    for rec, _ in st.running.values():
        if rec.stopped_by != signal.SIGKILL:
            rec.stopped_by = signum
    groups = live_groups(st.groups)
    for pgid in groups:
        signal_group(pgid, signum)
    st.signalled.clear()
    signal_orphans(st, signum, groups)


def signal_orphans(st: NodeState, signum: int, groups: set[int] | None = None) -> None:
    groups = live_groups(st.groups) if groups is None else groups
    for pid, pgid in direct_children():
        if pgid in groups or pid in st.signalled:
            continue
        st.signalled.add(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def signal_round(st: NodeState, signum: int) -> None:
    """`signum` to the process groups of the round's non-daemon processes."""
    for rec, _ in st.running.values():
        if not rec.spec.daemon:
            rec.stopped_by = signum
    for pgid in live_groups(st.round_groups):
        signal_group(pgid, signum)


def pass_on(st: NodeState, signum: int) -> None:
    """A signal that stops nothing (SIGUSR1/2) to each running process's group."""
    for pid in list(st.running):
        signal_group(pid, signum)


def round_left(st: NodeState) -> tuple[int, ...]:
    """The round's processes still there: its groups with a member, and its non-daemon
    processes not yet reaped (empty: the round's stop barrier is reached here)."""
    left = live_groups(st.round_groups) if st.round_groups else set()
    workers = [pid for pid, (rec, _) in st.running.items() if not rec.spec.daemon]
    if not left and not workers:
        st.round_groups.clear()
        return ()
    return tuple(sorted(left | set(workers)))
