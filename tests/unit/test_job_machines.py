"""Node 0's job machine and a node's member machine alone: no socket, thread, clock or process,
just events in (with the time passed in) and actions out. The same machines run under the real
shells in tests/unit/test_job_interleavings.py, test_job_scenarios.py and tests/cli."""

from __future__ import annotations

import ast
import signal
from pathlib import Path

from marun.job.actions import (
    Action,
    Announce,
    Bind,
    Broadcast,
    Log,
    Refuse,
    Send,
    TurnAway,
    WriteReport,
)
from marun.job.machine import CLOSED_LOST, LOOK, JobMachine
from marun.job.member_machine import Disconnect, MemberMachine, Push
from marun.job.messages import (
    Done,
    End,
    FailureSaid,
    Hello,
    Restart,
    Running,
    Start,
    StopJob,
    Stopped,
    Welcome,
)
from marun.job.phases import JobPhase, MemberPhase
from marun.job.protocol import PROTOCOL
from marun.plan.coordination import Coordination
from marun.runtime.failure import Failure
from marun.runtime.round_rule import RoundRule

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "marun"
PURE = ("job/machine", "job/job_state", "job/admission", "job/round_barrier",
        "job/preflight_barrier", "job/member_machine", "job/messages", "job/actions",
        "job/roster", "job/phases", "runtime/failure", "runtime/round_rule",
        "runtime/node_machine", "runtime/node_actions")  # fmt: skip
IMPURE = {"socket", "selectors", "threading", "time", "subprocess", "os", "select", "signal"}
WALL = 1.7e9


def _coord(**kw: object) -> Coordination:
    base: dict[str, object] = dict(
        host="10.0.0.1", port=29400, nodes=3, index=0, job="j", arrival_timeout=30.0,
        peer_timeout=10.0,
    )  # fmt: skip
    base.update(kw)
    return Coordination(**base)  # type: ignore[arg-type]


def _hello(node: int, instance: str = "", **kw: object) -> Hello:
    fields: dict[str, object] = dict(
        node=node, slot=0, instance=instance or f"i{node}", host=f"h{node}", leader="",
        started=False, daemons_only=False, version=PROTOCOL,
    )  # fmt: skip
    fields.update(kw)
    return Hello(**fields)  # type: ignore[arg-type]


def _kinds(actions: list[Action]) -> list[str]:
    return [a.message.KIND for a in actions if isinstance(a, (Send, Broadcast))]


def test_the_machines_hold_no_socket_thread_clock_or_process() -> None:
    for name in PURE:
        tree = ast.parse((PACKAGE / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not {a.name.split(".")[0] for a in node.names} & IMPURE, name
            elif isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] not in IMPURE, name


def _started(budget: int = 0, **coord: object) -> tuple[JobMachine, float]:
    rule = RoundRule(budget) if budget else None
    m = JobMachine(_coord(**coord), "leader", rule=rule, ports={}, now=0.0, wall=WALL)
    for node in range(3):
        actions = m.hello(f"c{node}", f"10.0.0.{node + 1}", _hello(node), 1.0, WALL + 1)
        assert isinstance(actions[0], Bind)
    assert m.job.phase is JobPhase.RUNNING
    assert _kinds(actions)[-1] == "start"
    return m, 2.0


def test_the_barrier_opens_on_the_last_node_and_not_before() -> None:
    m = JobMachine(_coord(), "leader", now=0.0, wall=WALL)
    for node in range(2):
        assert "start" not in _kinds(m.hello(f"c{node}", "a", _hello(node), 1.0, WALL))
    assert any(isinstance(a, Announce) for a in m.hello("c2", "a", _hello(2), 1.0, WALL))
    assert m.job.phase is JobPhase.RUNNING


def test_node_arrived_is_said_once_a_node_when_its_last_slot_comes() -> None:
    # (a line a device cost node 0 1.5 s of its arrival at 4,096 x 8)
    m = JobMachine(_coord(nodes=2, slots=4), "leader", now=0.0, wall=WALL)
    said: list[dict[str, object]] = []
    for node, slot in [(1, 0), (0, 0), (1, 2), (1, 1), (0, 1), (0, 2), (1, 3), (0, 3)]:
        actions = m.hello(f"c{node}.{slot}", "a", _hello(node, slot=slot), 1.0, WALL)
        said += [a.fields for a in actions if isinstance(a, Log) and a.event == "node_arrived"]
        if (node, slot) == (1, 3):
            assert said == [{"node": 1, "host": "h1", "slots": 4}]
    assert said == [{"node": 1, "host": "h1", "slots": 4}, {"node": 0, "host": "h0", "slots": 4}]
    assert m.job.phase is JobPhase.RUNNING


def test_a_failure_with_a_round_left_restarts_and_a_stop_signal_in_the_round_ends_the_job() -> None:
    m, t = _started(budget=2)
    failure = Failure(node=1, rank=3, exit_code=3)
    out = m.message("c1", (1, 0), "failure", FailureSaid(failure, 0, 99.0), t, WALL + t)
    assert _kinds(out) == ["restart"] and m.job.phase is JobPhase.RESTARTING
    # node 2's marun gets SIGTERM inside the round's stop barrier: the job ends with 143, no round
    signalled = Failure(node=2, exit_code=128 + signal.SIGTERM, stop_signal="SIGTERM")
    out = m.message("c2", (2, 0), "failure", FailureSaid(signalled, 1, None), t, WALL + t)
    assert _kinds(out) == ["stop"] and m.job.exit_code == 143
    for node in range(3):  # the nodes' `stopped` start nothing now
        assert "start" not in _kinds(m.message(f"c{node}", (node, 0), "stopped", Stopped(1), t, t))
    assert len(m.job.rounds) == 1


def test_a_round_starts_when_every_node_said_stopped_and_its_line_once_all_run() -> None:
    m, t = _started(budget=1)
    m.message(
        "c1", (1, 0), "failure", FailureSaid(Failure(node=1, rank=3, exit_code=3), 0, 99.0), t, WALL
    )
    for node in range(3):
        out = m.message(f"c{node}", (node, 0), "stopped", Stopped(1), t, WALL)
    assert _kinds(out) == ["start"] and m.job.phase is JobPhase.RUNNING
    lines = []
    for node in range(3):
        out = m.message(f"c{node}", (node, 0), "running", Running(1, 2), t, WALL + 0.25)
        lines += [a for a in out if isinstance(a, Announce)]
    assert len(lines) == 1 and "round 1/1" in lines[0].text and "all 6 ranks" in lines[0].text


def test_a_closed_connection_without_a_goodbye_is_lost_after_closed_lost_unless_it_comes_back() -> (
    None
):
    m, t = _started()
    m.closed("c1", t)
    assert _kinds(m.tick(t + CLOSED_LOST / 2, WALL)) == []
    m.hello("c1b", "a", _hello(1), t + 1.0, WALL)  # the same marun reconnects: a blip
    assert _kinds(m.tick(t + CLOSED_LOST + 1, WALL)) == []
    m.closed("c1b", t + 2)
    out = m.tick(t + 2 + CLOSED_LOST + 0.1, WALL)
    assert _kinds(out) == ["stop"] and m.job.members[(1, 0)].outcome == "lost"


def _started_tight() -> JobMachine:
    """A job of 3 nodes with peer_timeout 3 s (the least allowed), every node heard at 2.0."""
    m, t = _started(peer_timeout=3.0)
    for node in range(3):
        m.message(f"c{node}", (node, 0), "hb", None, t, WALL + t)
    return m


def test_node_0s_own_stall_is_not_its_members_silence() -> None:
    """Node 0's marun frozen 2.0 s (its slot's last beat 0.5 s before): its own slot, frozen with
    it, is not lost 1.1 s after the thaw, though 3.6 s passed since its last line; a node silent
    for peer_timeout while node 0 ran still is."""
    m = _started_tight()
    assert m.stalled(LOOK - 0.1, 2.5, 2.5, WALL + 2.5) == []  # a short gap: not node 0's stall
    assert m.job.not_run == 0.0
    # frozen from 2.5 to 4.5; the others' lines waited in the sockets, read at the thaw
    assert _kinds(m.stalled(2.0, 2.2, 4.5, WALL + 4.5)) == []  # they heard node 0 2.2 s ago
    for node in (1, 2):
        m.message(f"c{node}", (node, 0), "hb", None, 4.5, WALL + 4.5)
    assert _kinds(m.tick(5.6, WALL + 5.6)) == []
    assert all(member.outcome is None for member in m.job.members.values())
    for node in (0, 2):  # node 1 says nothing more
        m.message(f"c{node}", (node, 0), "hb", None, 7.0, WALL + 7.0)
    assert _kinds(m.tick(7.4, WALL + 7.4)) == []  # 2.9 s of silence
    out = m.tick(7.6, WALL + 7.6)
    assert _kinds(out) == ["stop"] and m.job.members[(1, 0)].outcome == "lost"
    assert m.job.first_failure is not None and m.job.first_failure.node == 1


def test_node_0_frozen_near_peer_timeout_is_the_jobs_failure_in_its_own_words() -> None:
    """Frozen 2.4 s with its last line to a member 2.8 s old (within GIVE_UP_MARGIN of
    peer_timeout 3 s): the others give up on node 0 before its next line reaches them, so node 0
    is the failure, said as its own stall, not as a lost node."""
    m = _started_tight()
    assert _kinds(m.stalled(2.4, 2.7, 4.9, WALL + 4.9)) == []  # 0.3 s to go: its beat is in time
    m = _started_tight()
    out = m.stalled(2.4, 2.8, 4.9, WALL + 4.9)
    assert _kinds(out) == ["stop"]
    failure = m.job.first_failure
    assert failure is not None and failure.node == 0
    assert "did not run for 2.4s" in (failure.why or "")
    # not yet given up (2.8 s < 3 s): each says its own end when the stop reaches it
    assert all(member.ended is None for member in m.job.members.values())

    m = _started_tight()
    m.stalled(2.9, 3.6, 5.4, WALL + 5.4)  # past peer_timeout: they gave up at 3.0 s of it
    gave_up = WALL + 5.4 - 3.6 + 3.0
    for node in (1, 2):
        member = m.job.members[(node, 0)]
        assert member.outcome == "lost" and member.ended == gave_up
    assert m.job.members[(0, 0)].ended is None
    # node 1's heartbeat, said before it gave up, read at the thaw; then its close: it still
    # ended when it gave up, not when node 0 read its last line
    m.message("c1", (1, 0), "hb", None, 5.4, WALL + 5.4)
    m.closed("c1", 5.4)
    m.tick(5.4 + CLOSED_LOST + 0.1, WALL + 7.1)
    assert m.job.members[(1, 0)].outcome == "lost"
    assert m.job.members[(1, 0)].ended == gave_up


def test_a_frozen_node_that_comes_back_is_counted_again_and_the_job_ends_with_every_node() -> None:
    m, t = _started(budget=1)
    for node in (0, 2):
        m.message(f"c{node}", (node, 0), "hb", None, t + 11, WALL)
    out = m.tick(t + 11, WALL)  # node 1 silent past peer_timeout: lost, a round
    assert _kinds(out) == ["restart"] and m.job.members[(1, 0)].outcome == "lost"
    m.message("c1", (1, 0), "stopped", Stopped(1), t + 12, WALL)  # it resumes: the same marun
    assert m.job.members[(1, 0)].outcome is None
    for node in (0, 2):
        out = m.message(f"c{node}", (node, 0), "stopped", Stopped(1), t + 12, WALL)
    assert _kinds(out) == ["start"]
    for node in range(3):
        m.message(f"c{node}", (node, 0), "end", End("succeeded", 0), t + 13, WALL)
    out = m.tick(t + 13, WALL)
    assert isinstance(out[0], WriteReport) and _kinds(out) == ["done"] and m.job.exit_code == 0


def test_a_hubs_word_does_not_count_a_lost_node_back_its_own_line_does() -> None:
    """A hub frozen with a node's beats in its sockets hands them on when it thaws: old, so they
    do not count the node back once node 0 found it lost (liveness hubs, marun.plan.hubs); the
    node's own line does (whole-job interleavings, WholeJobWithHubs, found it)."""
    m, t = _started(budget=1)
    for node in (0, 2):
        m.message(f"c{node}", (node, 0), "hb", None, t + 11, WALL)
    assert _kinds(m.tick(t + 11, WALL)) == ["restart"]
    assert m.job.members[(1, 0)].outcome == "lost"
    out, heard = m.group_beats([(1, [0.0], None, None)], t + 12, WALL)
    assert heard == [] and m.job.members[(1, 0)].outcome == "lost"
    assert not [a for a in out if isinstance(a, Log) and a.event == "node_back"]
    out = m.message("c1", (1, 0), "hb", None, t + 12, WALL)
    assert m.job.members[(1, 0)].outcome is None
    assert [a.event for a in out if isinstance(a, Log)] == ["node_back"]


def test_strangers_a_second_marun_and_another_version_are_turned_away() -> None:
    m, t = _started()
    assert isinstance(m.hello("x", "a", _hello(7), t, WALL)[0], TurnAway)  # not of this job
    out = m.hello("y", "a", _hello(1, instance="other"), t, WALL)  # node 1's marun still talks
    assert isinstance(out[0], TurnAway) and m.job.members[(1, 0)].conn == "c1"
    assert isinstance(m.hello("z", "a", _hello(2, version=PROTOCOL + 1), t, WALL)[0], TurnAway)
    assert isinstance(m.hello("c0", "a", _hello(0), t, WALL)[0], Refuse)  # a second hello
    assert isinstance(m.message("q", (2, 0), "hb", None, t, WALL)[0], Refuse)  # before hello


def test_a_member_gives_up_on_a_port_that_only_ever_turned_it_away_after_arrival_timeout() -> None:
    mm = MemberMachine(_coord(index=1), now=0.0)
    mm.connect_failed("no challenge", clash="10.0.0.1:29400 is another job's marun: job id x")
    out = []
    for tenth in range(1, 300):  # the loop turns every 0.2 s at most
        assert mm.turn(tenth / 10, connected=False) == []
    out = mm.turn(30.05, connected=False)
    stop = [a.event for a in out if isinstance(a, Push)]
    assert stop and stop[0].kind == "stop" and "two jobs on one job port" in str(stop[0].failure)
    assert any(isinstance(a, Disconnect) for a in out) and mm.gave_up


def test_a_member_follows_start_restart_stop_done_and_a_stall_is_its_own() -> None:
    mm = MemberMachine(_coord(index=1), now=0.0)
    mm.connected(0.1)
    mm.heard(Welcome("leader", None), 0.2)
    out = mm.heard(Start(0, {}), 0.3)
    assert [a.event.kind for a in out if isinstance(a, Push)] == ["start"]
    assert mm.heard(Start(0, {}), 0.4) == []  # a reconnection's reminder: once
    mm.heard(Restart(1, Failure(node=2, rank=1, exit_code=1)), 1.0)
    assert mm.phase is MemberPhase.RESTARTING
    assert mm.turn(20.0, connected=True)[0].event == "member_stalled"  # type: ignore[union-attr]
    assert not mm.gave_up  # frozen itself for 19 s: node 0 is not lost for that
    out = mm.heard(StopJob(143, Failure(stop_signal="SIGTERM", exit_code=143)), 20.1)
    assert [a.event.code for a in out if isinstance(a, Push)] == [143]
    mm.heard(Done(143), 20.2)
    assert mm.done and mm.done_code == 143


def test_a_member_whose_tries_of_a_connection_each_wait_long_still_gives_up_on_node_0() -> None:
    """Its connection dropped after the start, and node 0 takes each new one without a
    challenge (frozen, or its host gone): every try waits 6 s (a job of 8,000 connections), so
    its loop turns 6 s apart. That wait is node 0's silence, not a stall of this marun's own: it
    gives up on node 0 after peer_timeout (10 s) all the same."""
    mm = MemberMachine(_coord(index=1), now=0.0)
    mm.connected(0.1)
    mm.heard(Welcome("leader", None), 0.2)
    mm.heard(Start(0, {}), 0.3)
    now = 0.3
    out: list[object] = []
    while not mm.gave_up and now < 60.0:
        mm.connect_failed("timed out")
        now += 6.0
        out = list(mm.turn(now, connected=False, waited=6.0))
        assert not any(getattr(a, "event", None) == "member_stalled" for a in out)
    assert mm.gave_up and now <= 0.3 + 10.0 + 6.0, now
    stop = [a.event for a in out if isinstance(a, Push)]
    assert stop and "no word from node 0's marun for 10s" in str(stop[0].failure)


def test_at_most_ten_modules_at_the_top_of_the_package() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 10, top


def test_steps_that_stand_still_start_a_round_when_one_is_left_and_job_json_keeps_them() -> None:
    from marun.job.messages import Beat
    from marun.job.report import state_report
    from marun.progress.tracker import NodeReport, RankProgress

    coord = _coord(progress_timeout=5.0)
    m = JobMachine(coord, "leader", rule=RoundRule(1), ports={}, now=0.0, wall=WALL)
    for node in range(3):
        m.hello(f"c{node}", "a", _hello(node), 1.0, WALL)
    said = []
    for t in range(2, 12):  # steps 1..3, then they stand still while the ranks print (idle 0)
        step = min(t - 1, 3)
        for node in range(3):
            ranks = tuple(RankProgress(2 * node + i, step, 100, 1.0) for i in range(2))
            beat = Beat(0.0, None, NodeReport(ranks))
            m.message(f"c{node}", (node, 0), "hb", beat, float(t), WALL + t)
        out = m.tick(float(t), WALL + t)
        said += [a.text for a in out if isinstance(a, Announce)]
        if m.job.phase is JobPhase.DUMPING:
            break
    assert said and said[0].startswith("marun: step 1 of 100"), said
    assert m.job.phase is JobPhase.DUMPING and "steps have not advanced" in m.job.hang_why
    section = state_report(m.job, 0)["progress"]
    assert section["step"] == 3 and len(section["ranks"]) == 6, section
    out = []
    for t in range(12, 28):  # no stacks come within the dump's wait (15 s): a round
        for node in range(3):
            m.message(f"c{node}", (node, 0), "hb", Beat(0.0, None), float(t), WALL + t)
        out += m.tick(float(t), WALL + t)
    assert _kinds(out) == ["restart"] and m.job.rounds[0].cause.exit_code == 124
