"""How the supervisor's job ends: the signals it hears (relayed, or the first cause of the end),
the stop (the stop signal to every process group and adopted orphan, grace_period, SIGKILL,
giving up) and what moves it on. A base of `Supervisor` (marun.runtime.supervisor), which sets
every attribute declared here."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from marun.exit_codes import signal_exit
from marun.runtime.phase import LIVE, SUPERVISOR_MOVES, Phase
from marun.runtime.reaper import direct_children, live_groups, signal_group
from marun.runtime.result import ProcessRecord
from marun.runtime.signals import RELAYED, STOP, signal_name
from marun.runtime.supervisor_report import SupervisorReport

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


class SupervisorStop(SupervisorReport):
    _phase: Phase
    _pending: dict[int, float]
    _deadline: float
    _others_due: float | None
    _signalled: set[int]
    _stop_sig: int
    _last_scan: float
    _children_left: bool
    _running: dict[int, tuple[ProcessRecord, subprocess.Popen[bytes]]]
    _groups: set[int]
    _daemons_only: bool

    def _move(self, phase: Phase) -> None:
        """The one place the phase changes, checked against runtime.phase.SUPERVISOR_MOVES."""
        self._phase = SUPERVISOR_MOVES.move(self._phase, phase, self._emit)

    def _advance(self) -> None:
        if self._phase is Phase.RUNNING and self._stop_the_others():
            return
        if self._phase is Phase.RUNNING:
            waiting = [
                r for i, r in enumerate(self._records) if r.ending is None or i in self._pending
            ]
            workers = [r for r in self._records if not r.spec.daemon]
            if workers and all(r.ending is not None and r.ending.code == 0 for r in workers):
                self._begin_stop("done", signal.SIGTERM)
            elif not waiting:
                # Daemons only, and all of them have ended on their own (with 0: a non-zero end
                # is a failure above).
                self._begin_stop("done", signal.SIGTERM)
            return
        now = time.monotonic()
        if self._phase is Phase.STOPPING and now >= self._deadline:
            self._move(Phase.KILLING)
            self._deadline = now + KILL_WAIT
            self._emit("killing", "warning", after_grace_seconds=self._options.grace_period)
            self._signal_everything(signal.SIGKILL)
        elif self._phase is Phase.KILLING and now >= self._deadline:
            self._move(Phase.GAVE_UP)
            left = [pid for pid, _ in direct_children()] or sorted(self._running)
            self._emit("processes_left_after_sigkill", "error", pids=left)
        elif self._children_left and now - self._last_scan >= TICK:
            # Orphans adopted while stopping get the same signal as everyone before them.
            self._last_scan = now
            self._signal_orphans(signal.SIGKILL if self._phase is Phase.KILLING else self._stop_sig)

    def _stop_the_others(self) -> bool:
        """fail_fast off: once the others have had their window after the first failure, stop
        them here (True when that began)."""
        if self._others_due is None or time.monotonic() < self._others_due:
            return False
        window = self._options.grace_period + OTHERS_MARGIN
        self._emit("others_stopped_after_failure", "warning", after_seconds=window)
        self._begin_stop(f"still running {window:g}s after the first failure", signal.SIGTERM)
        return True

    def _on_signals(self, numbers: list[int]) -> None:
        for signum in numbers:
            if signum not in RELAYED:
                continue  # SIGCHLD: every wake-up reaps anyway
            self._emit(
                "signal_received", "warning", signal=signal_name(signum), phase=self._phase.value
            )
            if signum in STOP and self._phase in LIVE:
                self._pending.clear()
                if self._daemons_only and self._link is None:
                    # How a lone ps (or sshd) container ends. With a job, its end is the job's
                    # `done`; a signal before that is the job's failure (below), 128+N.
                    self.job.outcome = "succeeded"
                    self.job.exit_code = 0
                else:
                    self.job.outcome = "interrupted"
                    self.job.exit_code = signal_exit(signum)
                self.job.signal = signum
                before_start = self._phase is Phase.ARRIVING
                self._begin_stop(f"received {signal_name(signum)}", signum)
                self._signal_to_job(signum, before_start)
            elif signum in STOP:
                self._signal_everything(signum)
            else:
                for pid in list(self._running):
                    signal_group(pid, signum)

    def _signal_to_job(self, signum: int, before_start: bool) -> None:
        """A stop signal to this node's marun (the platform deleting its pod, a user's ^C) is a
        failure of the whole job, mid-run or while the nodes gather: node 0 stops every node
        with 128+N (docs/supervision.md, "Signals")."""
        if self._link is None:
            return
        name = signal_name(signum)
        self._link.report_failure(
            {
                "exit_code": signal_exit(signum),
                "signal": name,
                "stop_signal": name,
                "why": f"node {self._node.index} ({self._node.host}) stopped by {name}"
                + (" before the start" if before_start else ""),
            }
        )

    def _begin_stop(self, reason: str, signum: int) -> None:
        if self._phase not in LIVE:
            return
        self._move(Phase.STOPPING)
        self._stop_sig = signum
        self._pending.clear()
        self._deadline = time.monotonic() + self._options.grace_period
        if self._running or self._children_left:
            self._emit(
                "stopping",
                reason=reason,
                signal=signal_name(signum),
                grace_seconds=self._options.grace_period,
                running=len(self._running),
            )
        self._signal_everything(signum)

    def _signal_everything(self, signum: int) -> None:
        """Signal every process group marun started that still has a member, then any adopted
        orphan outside those groups (a daemon that made its own session)."""
        for rec, _ in self._running.values():
            if rec.stopped_by != signal.SIGKILL:
                rec.stopped_by = signum
        groups = live_groups(self._groups)
        for pgid in groups:
            signal_group(pgid, signum)
        self._signalled.clear()
        self._signal_orphans(signum, groups)

    def _signal_orphans(self, signum: int, groups: set[int] | None = None) -> None:
        groups = live_groups(self._groups) if groups is None else groups
        for pid, pgid in direct_children():
            if pgid in groups or pid in self._signalled:
                continue
            self._signalled.add(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
