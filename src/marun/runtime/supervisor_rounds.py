"""The supervisor's restart rounds (docs/supervision.md, "Restart rounds"): on a failure with
rounds left, this node's non-daemon processes are stopped (the stop signal, grace_period,
SIGKILL) while daemons (sshd, parameter servers) stay; once every one of them and everything in
their process groups is gone, node 0 hears `stopped` (the barrier: no rank of round k meets one
of round k+1), and its `start` of the round starts them again with the round's number and ports.
A job of one node has no node 0 to ask: the same rule (marun.runtime.round_rule) is applied here.
A base of `Supervisor` (marun.runtime.supervisor), which sets every attribute declared here."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import replace
from typing import Any

from marun.plan.launch_plan import ProcessSpec, round_env
from marun.runtime.output import end_the_line
from marun.runtime.phase import Phase
from marun.runtime.reaper import live_groups, signal_group
from marun.runtime.result import ProcessRecord
from marun.runtime.round_rule import (
    RoundRule,
    describe_cause,
    planned_ports,
    round_line,
    round_ports,
)
from marun.runtime.signals import signal_name
from marun.runtime.supervisor_stop import KILL_WAIT, SupervisorStop


def process_end(rec: ProcessRecord) -> dict[str, Any]:
    """Which process ended and how: what a round's cause and node 0's failure both say."""
    assert rec.ending is not None
    signum = rec.ending.signal
    return {
        "name": rec.spec.name,
        "rank": rec.spec.rank,
        "exit_code": rec.ending.code,
        "signal": None if signum is None else signal_name(signum),
    }


class SupervisorRounds(SupervisorStop):
    _log_fds: list[int]
    _round: int
    _round_rule: RoundRule | None  # a job of one node: its own rule (else node 0 applies it)
    _round_target: int | None  # RESTARTING: the round stopped for (None: node 0 has not said)
    _round_cause: dict[str, Any] | None
    _round_began: float  # monotonic: when this round's processes were started
    _round_detected: float  # monotonic: when the failure that ended the last round was seen
    _round_killed: bool
    _round_ports: dict[str, str]
    _round_groups: set[int]  # the process groups of the non-daemon processes started

    def _start(self, index: int) -> bool:
        raise NotImplementedError

    def _advance(self) -> None:
        if self._phase is Phase.RESTARTING:
            self._advance_round()
        else:
            super()._advance()

    def _init_rounds(self) -> None:
        options = self._options
        self._round = 0
        self._round_rule = None
        if options.max_restarts and self._link is None:
            self._round_rule = RoundRule.of(options)
        self._round_target = None
        self._round_cause = None
        self._round_began = time.monotonic()
        self._round_detected = 0.0
        self._round_killed = False
        self._round_ports = {}
        self._round_groups = set()

    def _spec_of_round(self, spec: ProcessSpec) -> ProcessSpec:
        """The process as round `_round` starts it: its number and, where it has them, the
        round's ports."""
        if self._round == 0:
            return spec
        env = {**spec.env, **round_env(spec.env, self._round, self._options.max_restarts)}
        env.update({k: v for k, v in self._round_ports.items() if k in spec.env})
        return replace(spec, env=env)

    # -- a failure ----------------------------------------------------------------------------

    def _failure_to_round(self, rec: ProcessRecord) -> bool:
        """With rounds on, a process's failure (already recorded as this round's first): True
        when it goes to a round. On a job of several nodes node 0 decides; this node stops its
        own ranks meanwhile, as either answer needs. Alone, the rule decides here."""
        if not self._options.max_restarts:
            return False
        assert rec.ending is not None
        cause = {"node": self._node.index, "host": self._node.host, **process_end(rec)}
        if self._link is not None:
            self._begin_round_stop(None, cause)
            return True
        assert self._round_rule is not None
        why = self._round_rule.next_round(rec.ending.code, self.round_uptime())
        if why is not None:
            self._emit("no_restart_round", "error", why=why)
            return False
        self._begin_round_stop(self._round_rule.round, cause)
        return True

    def round_uptime(self) -> float:
        return time.monotonic() - self._round_began

    def _begin_round_stop(self, target: int | None, cause: dict[str, Any] | None) -> None:
        if self._phase is not Phase.RESTARTING:
            self._round_detected = time.monotonic()
            self._round_killed = False
            self._deadline = time.monotonic() + self._options.grace_period
            self._move(Phase.RESTARTING)
            self._pending.clear()
            self._emit(
                "round_stopping",  # info: node 0's one line per round is what a person reads
                round=target,
                cause=describe_cause(cause),
                grace_seconds=self._options.grace_period,
            )
            self._signal_round(signal.SIGTERM)
        if target is not None:
            self._round_target = target
        if cause is not None:
            self._round_cause = cause

    def _signal_round(self, signum: int) -> None:
        for rec, _ in self._running.values():
            if not rec.spec.daemon:
                rec.stopped_by = signum
        for pgid in live_groups(self._round_groups):
            signal_group(pgid, signum)

    def _on_restart(self, round_: int, cause: dict[str, Any] | None) -> None:
        """Node 0's `restart`: round `round_` begins (this node stops its ranks, or has)."""
        if round_ <= self._round:
            return
        if self._phase is Phase.RUNNING or self._phase is Phase.RESTARTING:
            self._begin_round_stop(round_, cause)
        elif self._phase is Phase.ARRIVING and self._link is not None:
            # Nothing of ours runs (a new marun that joins the round, or one already stopped).
            self._round_target, self._round_cause = round_, cause
            self._link.report_stopped(round_)

    # -- the barrier --------------------------------------------------------------------------

    def _advance_round(self) -> None:
        """RESTARTING: SIGKILL after grace_period; once every process of the round is gone, the
        barrier (node 0's `stopped`) or, alone, the next round at once."""
        now = time.monotonic()
        left = live_groups(self._round_groups) if self._round_groups else set()
        workers = [r for r, _ in self._running.values() if not r.spec.daemon]
        if not left and not workers:
            self._round_groups.clear()
            if self._round_target is None:
                return  # node 0 has not said which round (or stop) yet
            if self._link is not None:
                self._move(Phase.ARRIVING)
                self._emit("round_stopped", round=self._round_target)
                self._link.report_stopped(self._round_target)
            else:
                names = self._options.round_ports
                planned = planned_ports((r.spec for r in self._records), names)
                ports = round_ports(planned, names, self._round_target)
                self._start_round(self._round_target, ports)
            return
        if now < self._deadline:
            return
        if not self._round_killed:
            self._round_killed = True
            self._deadline = now + KILL_WAIT
            self._emit("killing", "warning", after_grace_seconds=self._options.grace_period)
            self._signal_round(signal.SIGKILL)
            return
        # Outlived SIGKILL (stuck in the kernel): no round can start beside them.
        self._emit("processes_left_after_sigkill", "error", pids=sorted(left))
        self.job.outcome = "failed"
        self.job.exit_code = self.job.exit_code or 1
        self._begin_stop("processes of the round outlived SIGKILL", signal.SIGKILL)

    # -- the start ------------------------------------------------------------------------------

    def _start_round(self, round_: int, ports: dict[str, str]) -> None:
        """Round `round_`'s processes: every one not running (daemons that live on stay), each
        log marked with the round and its cause; then node 0 hears `running` (alone: the
        console's line for the round)."""
        if round_ > self._round:
            self._round = round_
            self._round_ports = {k: v for k, v in ports.items() if k in self._options.round_ports}
            self.job.rounds.append(
                {"round": round_, "cause": self._round_cause, "started": time.time()}
            )
            self.job.first_failure = None
            self.job.outcome = "succeeded"
            self.job.exit_code = 0
        self._move(Phase.RUNNING)
        self._round_target = None
        self._round_began = time.monotonic()
        running = {self._records.index(rec) for rec, _ in self._running.values()}
        line = round_line(self._round, self._options.max_restarts, self._round_cause)
        started = 0
        for index, rec in enumerate(self._records):
            if index in running:
                continue
            if self._round:
                end_the_line(self._log_fds[index])
                with contextlib.suppress(OSError):
                    os.write(self._log_fds[index], f"{line}\n".encode())
            rec.tail.clear()
            if not self._start(index):
                return
            started += 0 if rec.spec.daemon else 1
        if not self._round:
            return
        # The console's "all N ranks": processes with a rank (not MindSpore's scheduler); a
        # node whose processes have none (MPI's mpirun) counts its processes.
        ranked = sum(1 for r in self._records if r.spec.rank is not None and not r.spec.daemon)
        started = ranked or started
        if self._link is not None:
            self._link.activity()  # the hang watchdog's silence counts from the round's start
            self._link.report_running(self._round, started)
        else:
            took = time.monotonic() - self._round_detected
            self._say(f"{line} (all {started} ranks running again in {took:.2f}s)\n")
        self._emit("round_running", round=self._round, processes=started)
