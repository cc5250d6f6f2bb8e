"""One node's supervision as a pure machine (marun.runtime.node_machine.NodeMachine): events with
the time in, actions out, no process anywhere. The promises of docs/supervision.md for one node,
each as the machine states them (the real processes' side: tests/cli/test_supervisor.py,
test_restart_rounds.py, test_job_combined.py)."""

from __future__ import annotations

import signal
from collections import deque

from marun.exit_codes import signal_exit
from marun.plan.launch_plan import ProcessSpec, Supervision
from marun.runtime.failure import Failure
from marun.runtime.joblink import JobEvent
from marun.runtime.node_actions import (
    Emit,
    NodeAction,
    ReportFailure,
    ReportStopped,
    Restart,
    SignalAll,
    SignalRound,
    StartRound,
)
from marun.runtime.node_machine import NodeMachine
from marun.runtime.phase import Phase
from marun.runtime.reaper import Ending
from marun.runtime.result import JobRecord, ProcessRecord

WALL = 1.7e9


def _machine(ranks: int = 2, **options: object) -> NodeMachine:
    records = [
        ProcessRecord(ProcessSpec(f"rank{r}", ("t",), {}, "/w", "/l", rank=r), deque())
        for r in range(ranks)
    ]
    job = JobRecord("pytorch", 1, "h1", records)
    return NodeMachine(job, Supervision(grace_period=5.0, **options), 0.0)  # type: ignore[arg-type]


def _started(m: NodeMachine, actions: list[NodeAction], now: float) -> list[NodeAction]:
    """What a shell does with a StartRound: every process runs."""
    out: list[NodeAction] = []
    for action in actions:
        if isinstance(action, StartRound):
            for index in action.indexes:
                m.records[index].ending = None
                m.started(index)
            out += m.round_started(len(action.indexes), now)
    return out


def _exit(m: NodeMachine, index: int, code: int, now: float) -> list[NodeAction]:
    m.records[index].ending = Ending(code, code - 128 if code > 128 else None)
    return m.exited(index, now)


def _kinds(actions: list[NodeAction]) -> list[str]:
    return [type(a).__name__ for a in actions if not isinstance(a, Emit)]


def test_a_node_starts_nothing_before_the_job_says_start() -> None:
    m = _machine()
    assert m.begin(0.0, WALL, None) == [] and m.phase is Phase.ARRIVING
    out = m.heard([JobEvent("start", 0)], 1.0, WALL)
    assert _kinds(out) == ["StartRound"] and m.phase is Phase.RUNNING


def test_a_stop_signal_in_a_rounds_stop_barrier_ends_the_node_and_tells_node_0() -> None:
    m = _machine(max_restarts=3)
    _started(m, m.heard([JobEvent("start", 0)], 0.0, WALL), 0.0)
    out = _exit(m, 0, 3, 10.0)
    assert m.phase is Phase.RESTARTING and any(isinstance(a, SignalRound) for a in out)
    failure = next(a for a in out if isinstance(a, ReportFailure))
    assert failure.failure.rank == 0 and failure.failure.exit_code == 3 and failure.index == 0
    out = m.signals([signal.SIGTERM], 11.0)
    assert m.phase is Phase.STOPPING and m.job.exit_code == signal_exit(signal.SIGTERM)
    said = [a.failure for a in out if isinstance(a, ReportFailure)]
    assert said and said[0].stop_signal == "SIGTERM" and said[0].exit_code == 143
    # node 0's restart that crosses the signal starts nothing here
    assert not any(isinstance(a, StartRound) for a in m.heard([JobEvent("restart", 1)], 11.5, WALL))
    assert m.phase is Phase.STOPPING


def test_the_round_barrier_waits_for_every_rank_and_kills_after_the_grace_period() -> None:
    m = _machine(max_restarts=1, round_ports=("MASTER_PORT",))
    _started(m, m.heard([JobEvent("start", 0)], 0.0, WALL), 0.0)
    _exit(m, 0, 1, 1.0)
    m.heard([JobEvent("restart", 1, Failure(node=1, rank=0, exit_code=1))], 1.1, WALL)
    assert m.tick(2.0, True, (7,)) == []  # rank 1 still there, within the grace period
    out = m.tick(6.5, True, (7,))
    assert SignalRound(signal.SIGKILL) in out
    _exit(m, 1, 137, 6.55)  # the shell reaps it
    out = m.tick(6.6, True, ())  # every rank of the round gone: the barrier
    assert ReportStopped(1) in out and m.phase is Phase.ARRIVING
    out = m.heard([JobEvent("start", 1, ports={"MASTER_PORT": "29501"})], 7.0, WALL)
    assert _kinds(out) == ["StartRound"] and m.round == 1
    start = next(a for a in out if isinstance(a, StartRound))
    assert start.indexes == (0, 1) and start.mark is not None and "round 1/1" in start.mark
    spec = m.spec_of_round(m.records[0].spec.__class__("r", ("t",), {"MASTER_PORT": "1"}, "/", "/"))
    assert spec.env["MASTER_PORT"] == "29501"


def test_a_process_restarted_on_failure_counts_as_running_until_it_starts_again() -> None:
    m = _machine(ranks=1, recovery_restarts=1, recovery_wait=1.0)
    m.records[0].spec = m.records[0].spec.__class__(
        "w", ("t",), {}, "/w", "/l", rank=0, restart_on_failure=True
    )
    _started(m, m.heard([JobEvent("start", 0)], 0.0, WALL), 0.0)
    assert _kinds(_exit(m, 0, 3, 1.0)) == []  # scheduled, not a failure
    out = m.tick(2.5, True)
    assert Restart(0) in out and m.phase is Phase.RUNNING  # not "every process ended"


def test_node_0_s_stop_while_arriving_ends_the_node_with_the_job_s_code() -> None:
    m = _machine()
    out = m.heard([JobEvent("stop", 1, Failure(node=2, exit_code=1, why="lost"))], 1.0, WALL)
    assert m.phase is Phase.STOPPING and m.job.exit_code == 1 and SignalAll(signal.SIGTERM) in out
    assert m.job_stop is not None and m.job_stop.failure is not None
    m.tick(2.0, False)
    assert m.finished()


def test_a_rank_that_fails_in_the_stop_of_a_round_node_0_named_leaves_the_round_s_cause() -> None:
    # Node 0's `restart` names the round's cause (node 2's rank 4); one of this node's ranks then
    # exits 1 before its SIGTERM lands (its peer, rank 0, was stopped first and it lost the
    # connection): every node's marker names the job's cause, this one's too.
    job_cause = Failure(node=2, rank=4, exit_code=1)
    m = _machine(max_restarts=3)
    _started(m, m.heard([JobEvent("start", 0)], 0.0, WALL), 0.0)
    m.heard([JobEvent("restart", 1, job_cause)], 1.0, WALL)
    _exit(m, 0, 1, 1.05)
    _exit(m, 1, 143, 1.1)
    assert ReportStopped(1) in m.tick(1.2, True, ())
    start = next(a for a in m.heard([JobEvent("start", 1)], 1.5, WALL) if isinstance(a, StartRound))
    assert start.mark == "marun: round 1/3 after node 2 rank 4 exit 1"


def test_a_failure_here_before_node_0_s_restart_gives_way_to_the_job_s_cause() -> None:
    # This node's rank failed first here, but node 0 took another node's failure as the round's
    # cause (it heard of it first): the marker names node 0's.
    m = _machine(max_restarts=3)
    _started(m, m.heard([JobEvent("start", 0)], 0.0, WALL), 0.0)
    _exit(m, 0, 1, 1.0)
    m.heard([JobEvent("restart", 1, Failure(node=2, rank=4, exit_code=1))], 1.05, WALL)
    _exit(m, 1, 143, 1.1)
    assert ReportStopped(1) in m.tick(1.2, True, ())
    start = next(a for a in m.heard([JobEvent("start", 1)], 1.5, WALL) if isinstance(a, StartRound))
    assert start.mark == "marun: round 1/3 after node 2 rank 4 exit 1"
