"""A node's restart rounds (docs/supervision.md, "Restart rounds"): on a failure with rounds
left, this node's non-daemon processes are stopped (the stop signal, grace_period, SIGKILL)
while daemons (sshd, parameter servers) stay; once every one of them and everything in their
process groups is gone, node 0 hears `stopped` (the barrier: no rank of round k meets one of
round k+1), and its `start` of the round starts them again with the round's number and ports.
A job of one node has no node 0 to ask: the same rule (marun.runtime.round_rule) is applied here.
`NodeRounds` holds the rounds' own fields beside the node's state (marun.runtime.node_state);
marun.runtime.supervisor composes it and hands it the one way to start a process."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import replace
from typing import Callable

from marun.plan.launch_plan import ProcessSpec, round_env
from marun.runtime.failure import Failure
from marun.runtime.node_state import NodeState
from marun.runtime.node_stop import KILL_WAIT, begin_stop
from marun.runtime.output import end_the_line
from marun.runtime.phase import Phase
from marun.runtime.reaper import live_groups, signal_group
from marun.runtime.result import NodeRound, ProcessRecord
from marun.runtime.round_rule import (
    RoundRule,
    describe_cause,
    planned_ports,
    round_line,
    round_ports,
)
from marun.runtime.signals import signal_name


def process_end(rec: ProcessRecord) -> Failure:
    """Which process ended and how: what a round's cause and node 0's failure both say."""
    assert rec.ending is not None
    signum = rec.ending.signal
    return Failure(
        name=rec.spec.name,
        rank=rec.spec.rank,
        exit_code=rec.ending.code,
        signal=None if signum is None else signal_name(signum),
    )


class NodeRounds:
    """The rounds of `st`'s node; `start(index)` starts record `index` (False: it could not,
    and that failure has been handled)."""

    def __init__(self, st: NodeState, start: Callable[[int], bool]) -> None:
        self._st = st
        self._start = start
        self.round = 0
        # a job of one node: its own rule (else node 0 applies it)
        self._rule: RoundRule | None = None
        if st.options.max_restarts and st.link is None:
            self._rule = RoundRule.of(st.options)
        self._target: int | None = None  # RESTARTING: the round stopped for (None: not said)
        self._cause: Failure | None = None
        self._began = time.monotonic()  # when this round's processes were started
        self._detected = 0.0  # when the failure that ended the last round was seen
        self._killed = False
        self._ports: dict[str, str] = {}
        self.groups: set[int] = set()  # the process groups of the non-daemon processes started

    def spec_of_round(self, spec: ProcessSpec) -> ProcessSpec:
        """The process as this round starts it: its number and, where it has them, the round's
        ports."""
        if self.round == 0:
            return spec
        options = self._st.options
        env = {**spec.env, **round_env(spec.env, self.round, options.max_restarts)}
        env.update({k: v for k, v in self._ports.items() if k in spec.env})
        return replace(spec, env=env)

    def uptime(self) -> float:
        return time.monotonic() - self._began

    # -- a failure ----------------------------------------------------------------------------

    def failure_to_round(self, rec: ProcessRecord) -> bool:
        """With rounds on, a process's failure (already recorded as this round's first): True
        when it goes to a round. On a job of several nodes node 0 decides; this node stops its
        own ranks meanwhile, as either answer needs. Alone, the rule decides here."""
        st = self._st
        if not st.options.max_restarts:
            return False
        assert rec.ending is not None
        cause = process_end(rec).but(node=st.node.index, host=st.node.host)
        if st.link is not None:
            self._begin_round_stop(None, cause)
            return True
        assert self._rule is not None
        why = self._rule.next_round(rec.ending.code, self.uptime())
        if why is not None:
            st.emit("no_restart_round", "error", why=why)
            return False
        self._begin_round_stop(self._rule.round, cause)
        return True

    def _begin_round_stop(self, target: int | None, cause: Failure | None) -> None:
        st = self._st
        if st.phase is not Phase.RESTARTING:
            self._detected = time.monotonic()
            self._killed = False
            st.deadline = time.monotonic() + st.options.grace_period
            st.move(Phase.RESTARTING)
            st.pending.clear()
            st.emit(
                "round_stopping",  # info: node 0's one line per round is what a person reads
                round=target,
                cause=describe_cause(cause),
                grace_seconds=st.options.grace_period,
            )
            self._signal_round(signal.SIGTERM)
        if target is not None:
            self._target = target
        if cause is not None:
            self._cause = cause

    def _signal_round(self, signum: int) -> None:
        for rec, _ in self._st.running.values():
            if not rec.spec.daemon:
                rec.stopped_by = signum
        for pgid in live_groups(self.groups):
            signal_group(pgid, signum)

    def on_restart(self, round_: int, cause: Failure | None) -> None:
        """Node 0's `restart`: round `round_` begins (this node stops its ranks, or has)."""
        st = self._st
        if round_ <= self.round:
            return
        if st.phase is Phase.RUNNING or st.phase is Phase.RESTARTING:
            self._begin_round_stop(round_, cause)
        elif st.phase is Phase.ARRIVING and st.link is not None:
            # Nothing of ours runs (a new marun that joins the round, or one already stopped).
            self._target, self._cause = round_, cause
            st.link.report_stopped(round_)

    # -- the barrier --------------------------------------------------------------------------

    def advance(self) -> None:
        """RESTARTING: SIGKILL after grace_period; once every process of the round is gone, the
        barrier (node 0's `stopped`) or, alone, the next round at once."""
        st = self._st
        now = time.monotonic()
        left = live_groups(self.groups) if self.groups else set()
        workers = [r for r, _ in st.running.values() if not r.spec.daemon]
        if not left and not workers:
            self.groups.clear()
            if self._target is None:
                return  # node 0 has not said which round (or stop) yet
            if st.link is not None:
                st.move(Phase.ARRIVING)
                st.emit("round_stopped", round=self._target)
                st.link.report_stopped(self._target)
            else:
                names = st.options.round_ports
                planned = planned_ports((r.spec for r in st.records), names)
                ports = round_ports(planned, names, self._target)
                self.start_round(self._target, ports)
            return
        if now < st.deadline:
            return
        if not self._killed:
            self._killed = True
            st.deadline = now + KILL_WAIT
            st.emit("killing", "warning", after_grace_seconds=st.options.grace_period)
            self._signal_round(signal.SIGKILL)
            return
        # Outlived SIGKILL (stuck in the kernel): no round can start beside them.
        st.emit("processes_left_after_sigkill", "error", pids=sorted(left))
        st.job.outcome = "failed"
        st.job.exit_code = st.job.exit_code or 1
        begin_stop(st, "processes of the round outlived SIGKILL", signal.SIGKILL)

    # -- the start ------------------------------------------------------------------------------

    def start_round(self, round_: int, ports: dict[str, str]) -> None:
        """Round `round_`'s processes: every one not running (daemons that live on stay), each
        log marked with the round and its cause; then node 0 hears `running` (alone: the
        console's line for the round)."""
        st = self._st
        if round_ > self.round:
            self.round = round_
            self._ports = {k: v for k, v in ports.items() if k in st.options.round_ports}
            st.job.rounds.append(NodeRound(round_, self._cause, time.time()))
            st.job.first_failure = None
            st.job.outcome = "succeeded"
            st.job.exit_code = 0
        st.move(Phase.RUNNING)
        self._target = None
        self._began = time.monotonic()
        running = {st.records.index(rec) for rec, _ in st.running.values()}
        line = round_line(self.round, st.options.max_restarts, self._cause)
        started = 0
        for index, rec in enumerate(st.records):
            if index in running:
                continue
            if self.round:
                end_the_line(st.log_fds[index])
                with contextlib.suppress(OSError):
                    os.write(st.log_fds[index], f"{line}\n".encode())
            rec.tail.clear()
            if not self._start(index):
                return
            started += 0 if rec.spec.daemon else 1
        if self.round:
            self._say_running(line, started)

    def _say_running(self, line: str, started: int) -> None:
        st = self._st
        # The console's "all N ranks": processes with a rank (not MindSpore's scheduler); a
        # node whose processes have none (MPI's mpirun) counts its processes.
        ranked = sum(1 for r in st.records if r.spec.rank is not None and not r.spec.daemon)
        started = ranked or started
        if st.link is not None:
            st.link.activity()  # the hang watchdog's silence counts from the round's start
            st.link.report_running(self.round, started)
        else:
            took = time.monotonic() - self._detected
            st.say(f"{line} (all {started} ranks running again in {took:.2f}s)\n")
        st.emit("round_running", round=self.round, processes=started)
