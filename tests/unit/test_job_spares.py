"""Hot spares on node 0's side (marun.job.spares), against the job machine alone: 3 places and 1
spare (4 nodes), a fake clock, each node's lines as its marun says them. What a spare's marun
does with a place (plans itself, runs): tests/cli/test_spares.py."""

from __future__ import annotations

from typing import Any

import pytest

from marun.job.actions import Action, Announce, Broadcast, Log, Send
from marun.job.machine import CLOSED_LOST, JobMachine
from marun.job.messages import (
    Done,
    End,
    FailureSaid,
    Hello,
    Place,
    PreflightSaid,
    Restart,
    Running,
    Start,
    StopJob,
    Stopped,
)
from marun.job.protocol import PROTOCOL
from marun.job.report import state_report
from marun.plan.coordination import Coordination
from marun.preflight.result import CheckResult, NodeReport
from marun.runtime.failure import Failure
from marun.runtime.round_rule import RoundRule

WALL = 1.7e9


class Job:
    def __init__(
        self, nodes: int = 4, spares: int = 1, budget: int = 2, preflight: str = "off"
    ) -> None:
        coord = Coordination(
            host="h0", port=0, nodes=nodes, index=0, job="j", spares=spares,
            arrival_timeout=30.0, peer_timeout=10.0,
        )  # fmt: skip
        self.now = 100.0
        self.machine = JobMachine(
            coord, "leader", rule=RoundRule(budget, quick=0.0), ports={}, now=self.now,
            wall=WALL, preflight=preflight,
        )  # fmt: skip
        self.out: list[Action] = []
        self.instances = {i: f"m{i}" for i in range(nodes)}

    def _take(self, actions: list[Action]) -> list[Action]:
        self.out += actions
        return actions

    def hello(self, node: int, started: bool = False, daemons: bool = False) -> list[Action]:
        msg = Hello(node, 0, self.instances[node], f"h{node}", "", started, daemons, PROTOCOL)
        return self._take(self.machine.hello(f"c{node}", "127.0.0.1", msg, self.now, WALL))

    def say(self, node: int, msg: Any) -> list[Action]:
        conn = f"c{node}"
        return self._take(self.machine.message(conn, (node, 0), msg.KIND, msg, self.now, WALL))

    def tick(self, seconds: float = 1.0) -> list[Action]:
        self.now += seconds
        return self._take(self.machine.tick(self.now, WALL + self.now))

    def sent(self, node: int, kind: type) -> list[Any]:
        return [
            a.message
            for a in self.out
            if isinstance(a, Send) and a.key == (node, 0) and isinstance(a.message, kind)
        ]

    def broadcast(self, kind: type) -> list[Any]:
        return [
            a.message for a in self.out if isinstance(a, Broadcast) and isinstance(a.message, kind)
        ]

    def said(self, node: int) -> str:
        """What `node`'s console shows with its `start`s (every node's the same)."""
        return "\n".join(note for start in self.sent(node, Start) for note in start.notes)

    def announced(self) -> str:
        return "\n".join(a.text for a in self.out if isinstance(a, Announce))

    def lose(self, node: int) -> None:
        """Its marun SIGKILLed (its pod deleted): the connection closes, no goodbye."""
        self.machine.closed(f"c{node}", self.now)
        self.tick(CLOSED_LOST + 0.5)


def _started() -> Job:
    job = Job()
    for node in range(4):
        job.hello(node)
    return job


def test_the_spare_hears_no_start_and_the_others_their_place_first() -> None:
    job = _started()
    for node in range(3):
        assert job.sent(node, Place) == [Place(node)] and job.sent(node, Start) == [Start(0, {})]
    assert job.sent(3, Place) == [] and job.sent(3, Start) == []
    assert not job.broadcast(Start)


def test_a_lost_node_s_place_goes_to_the_spare_in_the_next_round() -> None:
    job = _started()
    job.lose(1)
    assert [r.round for r in job.broadcast(Restart)] == [1]
    job.say(0, Stopped(1))
    job.say(2, Stopped(1))
    assert job.sent(3, Place) == [Place(1)]
    assert [s.round for s in job.sent(3, Start)] == [1] and job.sent(0, Start)[-1].round == 1
    assert job.sent(1, Start) == [Start(0, {})]  # the lost node: nothing more
    for node in (0, 2, 3):  # every training node's console, the spare's too, with the start
        assert "node 1 (h1) lost (its marun's connection closed" in job.said(node)
        assert "spare node 3 (h3) takes its place in round 1" in job.said(node)
    assert "takes its place" not in job.announced()  # (not twice on node 0's)
    for node in (0, 2, 3):
        job.say(node, Running(1, 2))
    assert "round 1/2 after" in job.announced() and "(all 6 ranks running again" in job.announced()
    for node in (0, 2, 3):
        job.say(node, End("succeeded", 0))
    job.tick()
    assert job.machine.job.phase.value == "done"
    report = state_report(job.machine.job, 0)
    subs = report["rounds"][0]["substitutions"]
    assert subs == [{"place": 1, "lost": 1, "lost_host": "h1", "spare": 3, "spare_host": "h3"}]


def test_every_start_names_the_places_spares_hold_and_their_hosts() -> None:
    """mpi mode's hostfile (node 0's mpi-leader rewrites those lines: marun.plan.place_hosts):
    the start of round 1 and every later one, to every node, says place 1 is on h3."""
    job = _started()
    job.lose(1)
    job.say(0, Stopped(1))
    job.say(2, Stopped(1))
    for node in (0, 2, 3):
        assert job.sent(node, Start)[-1].hosts == ((1, "h3"),)
    assert job.sent(0, Start)[0].hosts == ()  # round 0: every place on its own node
    job.hello(2, started=True)  # a reconnection: its reminder of the round says it too
    reminder = job.sent(2, Start)[-1]
    assert (reminder.round, reminder.hosts) == (1, ((1, "h3"),))


def _mpi_started() -> Job:
    """mpi mode's shape: node 0 runs mpirun, places 1-2 sshd alone (daemons only), node 3 a
    spare (no processes yet: not daemons only)."""
    job = Job()
    job.hello(0)
    for node in (1, 2):
        job.hello(node, daemons=True)
    job.hello(3)
    return job


def test_mpi_a_spare_takes_daemons_only_and_the_job_ends_with_mpirun() -> None:
    """mpi mode: node 0 runs mpirun, the other places sshd alone (daemons only). When mpirun
    ends, the daemons and the spare that waits are told the job's end; a spare that took a
    place runs that place's sshd, daemons only too."""
    job = _mpi_started()
    job.lose(1)
    job.say(0, Stopped(1))
    job.say(2, Stopped(1))
    assert job.sent(3, Place) == [Place(1)]
    job.say(0, End("succeeded", 0))
    job.tick()
    assert job.broadcast(StopJob) == [StopJob(0, None)]  # the sshds and nothing else stop
    for node in (2, 3):
        job.say(node, End("succeeded", 0))
    job.tick()
    assert job.machine.job.phase.value == "done" and job.machine.job.exit_code == 0


def test_mpi_the_waiting_spare_hears_the_end_with_the_daemons() -> None:
    job = _mpi_started()
    job.say(0, End("succeeded", 0))
    job.tick()
    assert job.broadcast(StopJob) == [StopJob(0, None)], job.out


def _signalled(job: Job, node: int, name: str = "SIGTERM") -> None:
    """Its marun told to stop (its pod deleted): it says so, stops its ranks, says its end."""
    code = 128 + {"SIGTERM": 15, "SIGINT": 2}[name]
    failure = Failure(node=node, exit_code=code, signal=name, stop_signal=name)
    job.say(node, FailureSaid(failure, 0, None))


def test_a_node_told_to_stop_leaves_its_place_to_the_spare_and_the_job_goes_on() -> None:
    job = _started()
    _signalled(job, 1)
    assert job.machine.job.stopped is None
    assert [r.round for r in job.broadcast(Restart)] == [1]
    job.say(1, End("stopped", 143))
    assert job.sent(1, Done) == [Done(143)]  # its marun ends at once, with its own code
    job.say(0, Stopped(1))
    job.say(2, Stopped(1))
    job.tick()
    assert job.sent(3, Place) == [Place(1)] and [s.round for s in job.sent(3, Start)] == [1]
    assert "node 1 (h1) lost (its marun was stopped by SIGTERM (its pod deleted))" in (job.said(0))
    for node in (0, 2, 3):
        job.say(node, End("succeeded", 0))
    job.tick()
    assert job.machine.job.phase.value == "done" and job.machine.job.exit_code == 0


def test_node_0_told_to_stop_stops_the_job_with_spares_too() -> None:
    job = _started()
    _signalled(job, 0)
    assert job.machine.job.stopped is not None and job.machine.job.stopped.code == 143
    assert not job.broadcast(Restart)


def test_a_node_told_to_stop_with_no_round_left_stops_the_job_with_128_plus_n() -> None:
    job = Job(budget=1)
    for node in range(4):
        job.hello(node)
    job.lose(1)  # round 1 (the budget's last): the spare takes place 1
    for node in (0, 2):
        job.say(node, Stopped(1))
    job.tick()
    assert [s.round for s in job.sent(3, Start)] == [1]
    _signalled(job, 2, "SIGINT")
    assert job.machine.job.stopped is not None and job.machine.job.stopped.code == 130
    assert [r.round for r in job.broadcast(Restart)] == [1]


def test_a_spare_lost_while_it_waits_starts_no_round_and_the_job_goes_on() -> None:
    job = _started()
    job.lose(3)
    assert not job.broadcast(Restart) and job.machine.job.stopped is None
    for node in range(3):
        job.say(node, End("succeeded", 0))
    job.tick()
    assert job.machine.job.phase.value == "done" and job.machine.job.exit_code == 0


def test_two_nodes_lost_with_one_spare_the_second_place_waits_for_its_node() -> None:
    job = _started()
    job.lose(1)
    job.lose(2)  # during round 1's barrier
    job.say(0, Stopped(1))
    assert job.machine.job.members[(3, 0)].place == 1  # (told with the round's start)
    assert job.sent(0, Start) == [Start(0, {})]  # place 2 is waited for
    job.instances[2] = "m2-new"  # its pod recreated: the new marun takes place 2 again
    job.hello(2)
    job.say(2, Stopped(1))
    assert job.sent(2, Place)[-1] == Place(2) and job.sent(2, Start)[-1].round == 1
    assert [s.round for s in job.sent(3, Start)] == [1]


def _logged(job: Job, event: str) -> list[dict[str, Any]]:
    return [a.fields for a in job.out if isinstance(a, Log) and a.event == event]


def test_every_loss_is_in_the_events_the_second_during_the_round_too() -> None:
    job = _started()
    job.lose(1)
    job.lose(2)  # during round 1's barrier: no round of its own, but a line
    assert [(f["node"], f["slot"]) for f in _logged(job, "node_lost")] == [(1, 0), (2, 0)]
    assert "connection closed without a goodbye" in _logged(job, "node_lost")[1]["why"]
    assert [f["place"] for f in _logged(job, "spare_placed")] == [1]


def test_two_places_found_lost_in_one_look_the_lowest_goes_to_the_spare() -> None:
    job = _started()
    job.machine.closed("c2", job.now)  # node 2's connection closed first
    job.now += 0.001
    job.machine.closed("c1", job.now)
    job.tick(CLOSED_LOST + 0.5)  # both past CLOSED_LOST at this look
    assert [f["place"] for f in _logged(job, "spare_placed")] == [1]
    assert sorted(f["node"] for f in _logged(job, "node_lost")) == [1, 2]


def test_with_no_spare_left_the_round_waits_and_fails_after_arrival_timeout() -> None:
    job = _started()
    job.lose(1)
    job.say(0, Stopped(1))
    job.say(2, Stopped(1))
    job.say(3, Stopped(1))
    job.say(3, Running(1, 2))
    job.say(0, Running(1, 2))
    job.say(2, Running(1, 2))
    job.say(2, FailureSaid(Failure(node=2, rank=4, exit_code=1), 1, 5.0))
    job.lose(2)  # the second loss: no spare left
    job.say(0, Stopped(2))
    job.say(3, Stopped(2))
    job.tick(31.0)
    assert job.machine.job.stopped is not None and job.machine.job.exit_code == 1


def test_a_node_back_after_its_place_went_to_a_spare_is_told_to_stop() -> None:
    job = _started()
    job.machine.closed("c1", job.now)  # frozen: its connection gone, its ranks may run on
    job.tick(CLOSED_LOST + 0.5)
    job.say(0, Stopped(1))
    job.say(2, Stopped(1))
    assert job.sent(3, Place) == [Place(1)]
    job.hello(1, started=True)  # the same marun, thawed, reconnects
    stops = job.sent(1, StopJob)
    assert stops and stops[0].failure is not None and "went to a spare" in stops[0].failure.why
    job.say(1, End("failed", 1))
    assert job.sent(1, Done)  # not waited for: it hears the end at once
    assert job.machine.job.stopped is None


def test_a_replacement_pod_becomes_a_spare() -> None:
    job = _started()
    job.lose(1)
    job.say(0, Stopped(1))
    job.say(2, Stopped(1))
    job.instances[1] = "m1-new"
    job.hello(1)
    assert job.sent(1, Start) == [Start(0, {})]  # (the old marun's) nothing for the new one
    member = job.machine.job.members[(1, 0)]
    assert member.place is None and member.ended is None
    for node in (0, 2, 3):
        job.say(node, End("succeeded", 0))
    job.tick()
    assert job.sent(1, StopJob) == [StopJob(0, None)]  # the job's end, to the spare
    job.say(1, End("spare", 0))
    job.tick()
    assert job.machine.job.phase.value == "done" and job.machine.job.exit_code == 0


def test_a_node_that_left_with_no_spare_free_takes_its_place_back_in_its_new_pod() -> None:
    job = _started()
    _signalled(job, 3)  # the spare leaves first: none is free
    job.say(3, End("spare", 143))
    _signalled(job, 1)  # node 1's pod deleted: round 1 waits for its replacement
    job.say(1, End("stopped", 143))
    assert job.sent(1, Done) == [Done(143)]
    job.machine.closed("c1", job.now)
    job.say(0, Stopped(1))
    job.say(2, Stopped(1))
    job.tick()
    assert [s.round for s in job.sent(0, Start)] == [0]  # still waiting for place 1's node
    job.instances[1] = "m1-new"
    job.hello(1)  # the recreated pod: place 1 is still its own
    job.tick()
    member = job.machine.job.members[(1, 0)]
    assert member.place == 1 and not member.leaving
    assert job.sent(1, Place)[-1] == Place(1) and job.sent(1, Start)[-1].round == 1
    job.say(1, Running(1, 2))
    job.say(1, End("succeeded", 0))  # its end is waited for, as any node's that holds a place
    assert job.sent(1, Done) == [Done(143)]
    for node in (0, 2):
        job.say(node, End("succeeded", 0))
    job.tick()
    assert job.machine.job.phase.value == "done" and job.machine.job.exit_code == 0


def test_node_0_is_never_replaced() -> None:
    job = _started()
    job.lose(0)
    job.say(1, Stopped(1))
    job.say(2, Stopped(1))
    assert job.sent(3, Place) == []


# -- a node the preflight refuses --------------------------------------------------------------


def _preflight(job: Job, failing: set[int]) -> None:
    """Every node arrives and reports its checks (no probe listener: no ring); `failing`'s device
    check fails (the default policy refuses on it)."""
    for node in range(4):
        job.hello(node)
    for node in range(4):
        status = "fail" if node in failing else "ok"
        check = CheckResult("devices", status, "1 of 2 GPUs" if node in failing else "2 GPUs")
        job.say(node, PreflightSaid(NodeReport(node, f"h{node}", "127.0.0.1", 0, (check,))))


def test_a_node_the_preflight_refuses_gives_its_place_to_a_spare_before_the_start() -> None:
    job = Job(preflight="on")
    _preflight(job, {2})
    state = job.machine.job
    assert state.stopped is None and state.start_sent
    assert job.sent(3, Place) == [Place(2)] and [s.round for s in job.sent(3, Start)] == [0]
    assert job.sent(2, Place) == [] and job.sent(2, Start) == []
    (stop,) = job.sent(2, StopJob)
    assert stop.failure is not None and "node 2 (h2) refused by the preflight (node 2 (h2): " in (
        stop.failure.why or ""
    )
    for node in (0, 1, 3):
        assert "node 2 (h2) refused by the preflight; spare node 3 (h3) takes its place" in (
            job.said(node)
        )
    job.say(2, End("stopped", 1))
    assert job.sent(2, Done) == [Done(1)]  # not waited for: it ends at once
    for node in (0, 1, 3):
        job.say(node, End("succeeded", 0))
    job.tick()
    assert state.phase.value == "done" and state.exit_code == 0
    section = state_report(state, 0)["preflight"]
    assert section["decision"] == "start with warnings"
    assert [(r["place"], r["refused"], r["spare"]) for r in section["replaced"]] == [(2, 2, 3)]


def test_a_spare_the_preflight_refuses_is_told_to_stop_and_the_job_starts() -> None:
    job = Job(preflight="on")
    _preflight(job, {3})
    assert job.machine.job.stopped is None and job.sent(3, StopJob)
    assert [job.sent(n, Place) for n in range(3)] == [[Place(0)], [Place(1)], [Place(2)]]


@pytest.mark.parametrize("failing", [{0}, {1, 2}])
def test_the_refusal_stands_for_node_0_or_too_few_spares(failing: set[int]) -> None:
    job = Job(preflight="on")
    _preflight(job, failing)
    state = job.machine.job
    assert state.stopped is not None and not state.start_sent
    assert "preflight refused the start" in (state.stopped.failure.why or "")
    assert not any(job.sent(n, Place) for n in range(4))
