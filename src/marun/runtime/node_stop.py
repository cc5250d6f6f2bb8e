"""How a node's supervision ends: the signals it hears (relayed, or the first cause of the end),
the stop (the stop signal to every process group and adopted orphan, grace_period, SIGKILL,
giving up) and what moves it on. Functions of the node's state (marun.runtime.node_state),
called by marun.runtime.supervisor's loop and by marun.runtime.node_rounds."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from marun.exit_codes import signal_exit
from marun.runtime.failure import Failure
from marun.runtime.node_state import NodeState
from marun.runtime.phase import LIVE, Phase
from marun.runtime.reaper import direct_children, live_groups, signal_group
from marun.runtime.signals import RELAYED, STOP, signal_name

KILL_WAIT = 10.0  # after SIGKILL, how long to wait for the kernel to take processes away
TICK = 0.5  # at most this long between checks, so nothing depends on a single wake-up
DRAIN_WAIT = 10.0  # at the end, how long the relay may go without moving a byte (stuck)
TAIL_WAIT = 1.0  # how long a failure waits for the rest of its process's output (its tail)
# fail_fast off (marun simulate's nodes, which stop one another as one job): after the first
# failure, how long beyond grace_period the others get to end by the job's own stop before they
# are stopped here. It covers a heartbeat or two and their own SIGKILL wait; a node that failed
# before its job existed (exit 2 at plan time) would otherwise leave the others waiting out
# arrival_timeout + peer_timeout.
OTHERS_MARGIN = 15.0


def advance(st: NodeState) -> None:
    """Every phase but RESTARTING (marun.runtime.node_rounds): the end of the work, then
    grace_period, SIGKILL, giving up."""
    if st.phase is Phase.RUNNING and _stop_the_others(st):
        return
    if st.phase is Phase.RUNNING:
        waiting = [r for i, r in enumerate(st.records) if r.ending is None or i in st.pending]
        workers = [r for r in st.records if not r.spec.daemon]
        if workers and all(r.ending is not None and r.ending.code == 0 for r in workers):
            begin_stop(st, "done", signal.SIGTERM)
        elif not waiting:
            # Daemons only, and all of them have ended on their own (with 0: a non-zero end
            # is a failure above).
            begin_stop(st, "done", signal.SIGTERM)
        return
    now = time.monotonic()
    if st.phase is Phase.STOPPING and now >= st.deadline:
        st.move(Phase.KILLING)
        st.deadline = now + KILL_WAIT
        st.emit("killing", "warning", after_grace_seconds=st.options.grace_period)
        signal_everything(st, signal.SIGKILL)
    elif st.phase is Phase.KILLING and now >= st.deadline:
        st.move(Phase.GAVE_UP)
        left = [pid for pid, _ in direct_children()] or sorted(st.running)
        st.emit("processes_left_after_sigkill", "error", pids=left)
    elif st.children_left and now - st.last_scan >= TICK:
        # Orphans adopted while stopping get the same signal as everyone before them.
        st.last_scan = now
        signal_orphans(st, signal.SIGKILL if st.phase is Phase.KILLING else st.stop_sig)


def _stop_the_others(st: NodeState) -> bool:
    """fail_fast off: once the others have had their window after the first failure, stop
    them here (True when that began)."""
    if st.others_due is None or time.monotonic() < st.others_due:
        return False
    window = st.options.grace_period + OTHERS_MARGIN
    st.emit("others_stopped_after_failure", "warning", after_seconds=window)
    begin_stop(st, f"still running {window:g}s after the first failure", signal.SIGTERM)
    return True


def on_signals(st: NodeState, numbers: list[int]) -> None:
    for signum in numbers:
        if signum not in RELAYED:
            continue  # SIGCHLD: every wake-up reaps anyway
        st.emit("signal_received", "warning", signal=signal_name(signum), phase=st.phase.value)
        if signum in STOP and st.phase in LIVE:
            st.pending.clear()
            if st.daemons_only and st.link is None:
                # How a lone ps (or sshd) container ends. With a job, its end is the job's
                # `done`; a signal before that is the job's failure (below), 128+N.
                st.job.outcome = "succeeded"
                st.job.exit_code = 0
            else:
                st.job.outcome = "interrupted"
                st.job.exit_code = signal_exit(signum)
            st.job.signal = signum
            before_start = st.phase is Phase.ARRIVING
            begin_stop(st, f"received {signal_name(signum)}", signum)
            _signal_to_job(st, signum, before_start)
        elif signum in STOP:
            signal_everything(st, signum)
        else:
            for pid in list(st.running):
                signal_group(pid, signum)


def _signal_to_job(st: NodeState, signum: int, before_start: bool) -> None:
    """A stop signal to this node's marun (the platform deleting its pod, a user's ^C) is a
    failure of the whole job, mid-run or while the nodes gather: node 0 stops every node
    with 128+N (docs/supervision.md, "Signals")."""
    if st.link is None:
        return
    name = signal_name(signum)
    st.link.report_failure(
        Failure(
            exit_code=signal_exit(signum),
            signal=name,
            stop_signal=name,
            why=f"node {st.node.index} ({st.node.host}) stopped by {name}"
            + (" before the start" if before_start else ""),
        )
    )


def begin_stop(st: NodeState, reason: str, signum: int) -> None:
    """The one stop: STOPPING, `signum` to everything, grace_period (once; not after it)."""
    if st.phase not in LIVE:
        return
    st.move(Phase.STOPPING)
    st.stop_sig = signum
    st.pending.clear()
    st.deadline = time.monotonic() + st.options.grace_period
    if st.running or st.children_left:
        st.emit(
            "stopping",
            reason=reason,
            signal=signal_name(signum),
            grace_seconds=st.options.grace_period,
            running=len(st.running),
        )
    signal_everything(st, signum)


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
