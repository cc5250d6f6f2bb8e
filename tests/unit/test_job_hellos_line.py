"""A relay's `hellos` line is taken in one call of node 0's machine (`JobMachine.hellos`): each
entry must come out as its slot's own hello would, in the line's order, whatever the entries
are. The whole-job interleavings drive one slot a node, one hello at a time; here lines of
several hellos are held against the same hellos taken one at a time, on two machines fed alike
(hypothesis): new slots, a slot whose marun still talks on another connection, another marun
for a slot whose connection closed, another protocol version, a node not of the job, a second
hello on one lane, the line that opens the barrier, lines after the start, connections closing
and ticks between lines. One line of each kind is also spelled out."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_job_machines import WALL, _coord, _hello

from marun.job.actions import Action, Bind, Broadcast, Log, Send, TurnAway
from marun.job.machine import JobMachine, SaidHello
from marun.job.messages import Start, Welcome
from marun.job.phases import JobPhase
from marun.job.protocol import PROTOCOL

NODES, SLOTS = 2, 4


def _machine() -> JobMachine:
    return JobMachine(_coord(nodes=NODES, slots=SLOTS), "leader", now=0.0, wall=WALL)


def _said(
    node: int, slot: int, conn: int, instance: str = "a", version: int = PROTOCOL
) -> SaidHello:
    """Slot `slot` of node `node` says hello on lane (conn, slot) of its node's `conn`-th
    connection (a relay's lanes: one a slot of the node's one connection)."""
    hello = _hello(node, f"{instance}{node}.{slot}", slot=slot, version=version)
    return (f"n{node}.c{conn}.s{slot}", f"10.0.0.{node + 1}", hello)


def _state(m: JobMachine) -> Any:
    job = m.job
    members = sorted(
        (key, s.instance, s.conn, s.ended, s.outcome) for key, s in job.members.items()
    )
    return job.phase, members, sorted(job.bound.items()), job.start_sent, job.stopped


entries = st.tuples(
    st.integers(0, NODES),  # the node (NODES: not of this job)
    st.integers(0, SLOTS - 1),
    st.integers(0, 2),  # which of its node's connections
    st.sampled_from(["a", "b"]),  # b: another marun for the slot
    st.booleans(),  # another protocol version
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("line"), st.lists(entries, min_size=1, max_size=SLOTS + 2)),
        st.tuples(st.just("closed"), entries),
        st.tuples(st.just("time"), st.floats(0.0, 12.0)),
    ),
    max_size=12,
)


@settings(max_examples=int(os.environ.get("MARUN_PROPERTY_EXAMPLES", "200")), deadline=None)
@given(steps=steps)
def test_a_line_of_hellos_is_its_hellos_one_at_a_time(steps: list[tuple[str, Any]]) -> None:
    whole, single = _machine(), _machine()
    now = 1.0
    for kind, what in steps:
        wall = WALL + now
        if kind == "line":
            said = [_said(n, s, c, i, PROTOCOL + 1 if other else PROTOCOL)
                    for n, s, c, i, other in what]  # fmt: skip
            one_by_one: list[Action] = []
            for handle, address, hello in said:
                one_by_one += single.hello(handle, address, hello, now, wall)
            assert whole.hellos(said, now, wall) == one_by_one
        elif kind == "closed":
            handle = _said(*what[:4])[0]
            whole.closed(handle, now)
            single.closed(handle, now)
        else:
            now += what
            assert whole.tick(now, WALL + now) == single.tick(now, WALL + now)
        assert _state(whole) == _state(single)


def test_one_line_each_entry_as_its_own_hello() -> None:
    m = _machine()
    # Node 1's four slots in one line: bound in order, one welcome each, its line once.
    out = m.hellos([_said(1, s, 0) for s in range(SLOTS)], 1.0, WALL + 1)
    assert [a.handle for a in out if isinstance(a, Bind)] == [f"n1.c0.s{s}" for s in range(4)]
    assert [a.key for a in out if isinstance(a, Send)] == [(1, s) for s in range(4)]
    assert all(isinstance(a.message, Welcome) for a in out if isinstance(a, Send))
    assert [a.fields["node"] for a in out if isinstance(a, Log) and a.event == "node_arrived"] == [
        1
    ]
    # Node 0's line, with a stranger, another version and a second marun for node 1's slot 2
    # (whose marun still talks) among its slots: those three turned away alone, in their place;
    # the line's last slot opens the barrier, its welcome before the start.
    line = [
        _said(0, 0, 0),
        _said(NODES, 0, 0),  # not of this job
        _said(0, 1, 0),
        _said(1, 2, 1, instance="b"),  # node 1 slot 2 talks on its first connection
        _said(0, 2, 0),
        _said(0, 3, 1, version=PROTOCOL + 1),
    ]
    out = m.hellos(line, 1.5, WALL + 1.5)
    turned = [a.handle for a in out if isinstance(a, TurnAway)]
    assert turned == [f"n{NODES}.c0.s0", "n1.c1.s2", "n0.c1.s3"]
    assert m.job.members[(1, 2)].conn == "n1.c0.s2" and m.job.phase is JobPhase.GATHERING
    out = m.hellos([_said(0, 3, 0)], 1.6, WALL + 1.6)
    kinds = [type(a.message) for a in out if isinstance(a, (Send, Broadcast))]
    assert kinds == [Welcome, Start] and m.job.phase is JobPhase.RUNNING
