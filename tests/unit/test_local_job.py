"""A job of one node runs node 0's job machine in its own process (marun.job.local_job.LocalJob):
the node's machine (marun.runtime.node_machine) reports to it and hears it as it would node 0
over the wire. Driven here with fake processes and a fake order of events; the real processes'
side: tests/cli/test_restart_rounds.py, test_supervisor.py, test_job_combined.py."""

from __future__ import annotations

import signal
from collections import deque

import pytest

from marun.job.local_job import LocalJob
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec, Supervision
from marun.runtime.joblink import JobEvent
from marun.runtime.node_actions import (
    NodeAction,
    ReportFailure,
    ReportRunning,
    ReportStopped,
    StartRound,
)
from marun.runtime.node_machine import NodeMachine
from marun.runtime.phase import Phase
from marun.runtime.reaper import Ending
from marun.runtime.result import JobRecord, ProcessRecord

WALL = 1.7e9


class OneNode:
    """A NodeMachine and its LocalJob, with the shell's part done by hand: a StartRound starts
    every process, reports go to the link, the link's events come back to the machine."""

    def __init__(
        self, ranks: int = 2, daemons: bool = False, force: bool = False, **options: object
    ) -> None:
        specs = tuple(
            ProcessSpec(f"rank{r}", ("t",), {}, "/w", "/l", rank=r, daemon=daemons)
            for r in range(ranks)
        )
        watching = Supervision(grace_period=5.0, **options)  # type: ignore[arg-type]
        plan = LaunchPlan("pytorch", (NodePlan(0, "h0", processes=specs),), supervision=watching)
        self.logged: list[str] = []
        self.link = LocalJob(
            plan, lambda event, level="info", **kw: self.logged.append(event), force=force
        )
        records = [ProcessRecord(spec, deque()) for spec in specs]
        self.machine = NodeMachine(JobRecord("pytorch", 0, "h0", records), watching, 0.0)
        self.starts = 0

    def carry_out(self, actions: list[NodeAction], now: float) -> None:
        m = self.machine
        for action in actions:
            if isinstance(action, StartRound):
                self.starts += 1
                for index in action.indexes:
                    m.records[index].ending = None
                    m.started(index)
                self.carry_out(m.round_started(len(action.indexes), now), now)
            elif isinstance(action, ReportFailure):
                self.link.report_failure(action.failure, action.uptime)
            elif isinstance(action, ReportStopped):
                self.link.report_stopped(action.round)
            elif isinstance(action, ReportRunning):
                self.link.report_running(action.round, action.ranks)

    def hear(self, now: float) -> None:
        self.carry_out(self.machine.heard(self.link.poll(), now, WALL), now)

    def exit(self, index: int, code: int, now: float) -> None:
        self.machine.records[index].ending = Ending(code, code - 128 if code > 128 else None)
        self.carry_out(self.machine.exited(index, now), now)
        self.hear(now)

    def end(self) -> int:
        return self.link.report_end(self.machine.job.outcome, self.machine.job.exit_code)


@pytest.mark.parametrize("force", [False, True])
def test_the_job_says_start_at_once_and_the_end_is_the_node_s(force: bool) -> None:
    """`force`: the machine hears the end although nothing was reported before (by default a
    job that ended well never builds it): the code is the same either way."""
    one = OneNode(force=force)
    one.carry_out(one.machine.begin(0.0, WALL, None), 0.0)
    assert one.machine.phase is Phase.ARRIVING
    one.hear(0.0)
    assert one.machine.phase is Phase.RUNNING and one.starts == 1
    one.exit(0, 0, 1.0)
    one.exit(1, 0, 1.1)
    one.carry_out(one.machine.tick(1.2, False), 1.2)
    assert one.machine.phase is Phase.STOPPING and one.end() == 0
    assert (one.link._machine is not None) is force
    one.link.close()


def test_restart_rounds_go_through_the_job_s_rule_and_barrier(
    capsys: pytest.CaptureFixture[str],
) -> None:
    one = OneNode(max_restarts=1, quick_failure=0.0)
    one.hear(0.0)
    one.exit(1, 3, 5.0)  # the job's rule: round 1 (the node stops its ranks meanwhile)
    assert one.machine.phase is Phase.RESTARTING and one.machine.target == 1
    one.exit(0, 143, 5.1)
    one.carry_out(one.machine.tick(5.2, True, ()), 5.2)  # the barrier: `stopped`, then `start`
    one.hear(5.3)
    assert one.machine.round == 1 and one.starts == 2 and one.machine.phase is Phase.RUNNING
    said = capsys.readouterr().err
    assert "marun: round 1/1 after node 0 rank 1 exit 3 (all 2 ranks running" in said
    assert "job_restart" in one.logged and "job_round_start" in one.logged
    one.exit(0, 3, 9.0)  # no round left: the job stops with the rank's code
    assert "no_restart_round" in one.logged
    assert one.machine.phase is Phase.STOPPING and one.machine.job_stop is not None
    assert one.machine.job_stop.code == 3
    one.exit(1, 143, 9.1)
    assert one.end() == 3
    one.link.close()


def test_a_stop_signal_in_the_round_barrier_ends_the_job_with_128_plus_n() -> None:
    one = OneNode(max_restarts=3)
    one.hear(0.0)
    one.exit(0, 1, 40.0)
    assert one.machine.phase is Phase.RESTARTING
    one.carry_out(one.machine.signals([signal.SIGTERM], 40.5), 40.5)
    one.hear(40.6)
    assert one.machine.phase is Phase.STOPPING
    one.exit(1, 143, 41.0)
    assert one.end() == 143 and one.starts == 1
    one.link.close()


def test_a_job_of_daemons_alone_ends_with_0_on_a_stop_signal() -> None:
    one = OneNode(ranks=1, daemons=True)
    one.hear(0.0)
    one.carry_out(one.machine.tick(1.0, True), 1.0)
    assert one.machine.phase is Phase.RUNNING  # (no worker's end ends it)
    one.carry_out(one.machine.signals([signal.SIGTERM], 2.0), 2.0)
    one.exit(0, 143, 2.1)
    assert one.end() == 0
    one.link.close()


def test_the_start_is_queued_once_and_wakes_the_loop() -> None:
    one = OneNode()
    import select

    assert select.select([one.link.fileno()], [], [], 0)[0]
    assert one.link.poll() == [JobEvent("start", 0)]
    assert not select.select([one.link.fileno()], [], [], 0)[0] and one.link.poll() == []
    one.link.close()
