"""A job of one node in every interleaving (hypothesis, stateful): its `NodeMachine` and the
`JobMachine` it runs in its own process (marun.job.local_job.LocalJob), the link's real code
between them; processes are records that end when told, the clock is the test's.

Steps, in any order: a rank exits with any code, a stop signal (TERM, INT, HUP, QUIT) to marun in
any phase, time passing; ranks that ignore the stop signal or not (SIGKILL after
grace_period), max_restarts 0 to 3.

Invariants after every step: nothing raised, and (MARUN_STRICT_PHASES=1) no phase move outside a
table; rounds <= max_restarts; a stop signal while the job is live stops it at once with 128+N
and no round begins after it. At the end (every rank let finish): marun ends within a bounded
time, with the job's code (what the job machine says) equal to the node's own; the rounds it
ran are the ones the job machine started.
"""

from __future__ import annotations

import os
import signal
from collections import deque

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from test_job_interleavings import run_interleavings

from marun.exit_codes import signal_exit
from marun.job.local_job import LocalJob
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec, Supervision
from marun.runtime.node_actions import (
    NodeAction,
    ReportFailure,
    ReportRunning,
    ReportStopped,
    Restart,
    SignalAll,
    SignalRound,
    StartRound,
)
from marun.runtime.node_machine import NodeMachine
from marun.runtime.phase import LIVE
from marun.runtime.reaper import Ending
from marun.runtime.result import JobRecord, ProcessRecord

RANKS = 3
GRACE = 5.0
WALL = 1.7e9
SETTLE = 2 * GRACE + 60.0  # fake seconds the node may take to end once its ranks are let finish
STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


class OneNodeJob(RuleBasedStateMachine):
    @initialize(budget=st.integers(0, 3), stubborn=st.booleans())
    def make_job(self, budget: int, stubborn: bool) -> None:
        self.budget = budget
        self.now = 1000.0
        specs = tuple(
            ProcessSpec(f"rank{r}", ("python", "t.py"), {}, "/w", "/l", rank=r)
            for r in range(RANKS)
        )
        # quick_failure 0: every failure may start a round (the rule's other limbs have their
        # own tests); the budget is what the interleavings spend.
        watching = Supervision(grace_period=GRACE, max_restarts=budget, quick_failure=0.0)
        plan = LaunchPlan("pytorch", (NodePlan(0, "h0", processes=specs),), supervision=watching)
        self.link = LocalJob(plan, lambda event, level="info", **kw: None)
        records = [ProcessRecord(spec, deque()) for spec in specs]
        self.record = JobRecord("pytorch", 0, "h0", records)
        self.node = NodeMachine(self.record, watching, self.now)
        self.alive: set[int] = set()
        self.exits: list[tuple[int, Ending]] = []
        self.stubborn = stubborn  # its ranks ignore the stop signal (SIGKILL after grace)
        self.signalled: tuple[int, int] | None = None  # (128+N, rounds then)
        self.code: int | None = None
        self._do(self.node.begin(self.now, WALL, None))
        self._settle()

    # -- the shell --------------------------------------------------------------------------------

    def _do(self, actions: list[NodeAction]) -> None:
        todo = deque(actions)
        while todo:
            action = todo.popleft()
            more: list[NodeAction] = []
            if isinstance(action, StartRound):
                for index in action.indexes:
                    self.record.processes[index].ending = None
                    self.alive.add(index)
                    self.node.started(index)
                more = self.node.round_started(len(action.indexes), self.now)
            elif isinstance(action, Restart):
                self.alive.add(action.index)
                self.node.started(action.index)
            elif isinstance(action, (SignalAll, SignalRound)):
                for index in sorted(self.alive):
                    if action.signum == signal.SIGKILL or not self.stubborn:
                        self._end(index, 128 + action.signum)
            elif isinstance(action, ReportFailure):
                self.link.report_failure(action.failure, action.uptime)
            elif isinstance(action, ReportStopped):
                self.link.report_stopped(action.round)
            elif isinstance(action, ReportRunning):
                self.link.report_running(action.round, action.ranks)
            todo.extendleft(reversed(more))

    def _end(self, index: int, code: int) -> None:
        if index in self.alive:
            self.alive.discard(index)
            self.exits.append((index, Ending(code, code - 128 if code > 128 else None)))

    def _settle(self) -> None:
        """The supervisor's loop: the link's events, reaping, a tick; until nothing moves."""
        for _ in range(50):
            events = self.link.poll()
            if events:
                self._do(self.node.heard(events, self.now, WALL + self.now))
            reaped, self.exits = self.exits, []
            for index, ending in reaped:
                self.record.processes[index].ending = ending
                self._do(self.node.exited(index, self.now))
            left = tuple(sorted(self.alive)) if self.node.phase.value == "restarting" else ()
            self._do(self.node.tick(self.now, bool(self.alive), left))
            if not events and not reaped and not self.exits and not self.link._events:
                return
        raise AssertionError("the node and its job did not settle within 50 turns")

    # -- steps ------------------------------------------------------------------------------------

    @rule(rank=st.integers(0, RANKS - 1), code=st.sampled_from([0, 1, 3, 137]))
    def rank_exits(self, rank: int, code: int) -> None:
        self._end(rank, code)
        self._settle()

    @rule(signum=st.sampled_from(STOPS))
    def stop_signal(self, signum: int) -> None:
        live = self.node.phase in LIVE and self.node.job_stop is None
        self._do(self.node.signals([signum], self.now))
        self._settle()
        if live and self.signalled is None:
            self.signalled = (signal_exit(signum), len(self.record.rounds))

    @rule(seconds=st.sampled_from([0.5, 3.0, GRACE + 1.0, 12.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self._settle()

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def rounds_within_the_budget(self) -> None:
        assert len(self.record.rounds) <= self.budget

    @invariant()
    def a_stop_signal_stops_the_job(self) -> None:
        if self.signalled is None:
            return
        code, rounds = self.signalled
        assert self.node.phase not in LIVE
        assert self.record.exit_code == code
        assert len(self.record.rounds) == rounds
        machine = self.link._machine
        assert machine is not None and machine.job.stopped is not None  # the job heard it

    def teardown(self) -> None:
        if not hasattr(self, "node"):
            return
        # Every rank is let finish: each running one exits 0; the node must end in bounded time.
        self.stubborn = False
        deadline = self.now + SETTLE
        while not self.node.finished():
            assert self.now < deadline, f"not ended: {self.node.phase}"
            for index in sorted(self.alive):
                self._end(index, 0)
            self.now += 1.0
            self._settle()
        code = self.link.report_end(self.record.outcome, self.record.exit_code)
        # The job's code is the node's own (one node: nobody else's end to weigh)...
        assert code == self.record.exit_code
        if self.signalled is not None:
            assert code == self.signalled[0]
        # ...and the job machine, when one was built, started the rounds the node ran (a round
        # begun and stopped in its barrier is the job's record only).
        machine = self.link._machine
        if machine is not None:
            started = [r for r in machine.job.rounds if r.stopped_at is not None]
            assert len(started) == len(self.record.rounds)
            assert machine.job.phase.value == "done"
        self.link.close()


def test_a_job_of_one_node_in_every_interleaving() -> None:
    run_interleavings(
        int(os.environ.get("MARUN_PROPERTY_EXAMPLES", "200")), steps=30, machine=OneNodeJob
    )
