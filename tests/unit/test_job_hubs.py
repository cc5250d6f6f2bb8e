"""Liveness hubs, node 0's side (marun.plan.hubs, docs/supervision.md): a hub's `groupbeats`
line speaks for its group's slots, each taken on the member's own lane; node 0's heartbeats to a
node spoken for go through the hub (none direct) until the node beats node 0 itself again or the
hub's connection closes, when one goes at once. Refused: a `groupbeats` line from a node that is
not a hub, or naming a node of another group. A real coordinator whose thread never runs, real
socket pairs; the clock is moved by the times the coordinator compares, nothing sleeps."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from marun.job.conns import Conn
from marun.job.coordinator import Coordinator
from marun.job.protocol import PROTOCOL, decode, encode, new_nonce
from marun.plan.coordination import Coordination, coordination_from_dict
from marun.plan.hubs import HUB_GROUP, HUBS_FROM, group_of, hub_group, hub_of, hub_port, is_hub

SECRET = b"hubs-secret"
JOB = "job-h"
NODES, SLOTS, GROUP = 12, 2, 4  # groups: 0-3 (node 0's own), 4-7 (hub 4), 8-11 (hub 8)


def test_who_is_whose_hub() -> None:
    coord = Coordination(host="h", port=7000, nodes=NODES, index=0, job=JOB, hub_group=GROUP)
    assert [hub_of(coord, n) for n in range(NODES)] == [None] * 5 + [4, 4, 4, None, 8, 8, 8]
    assert [n for n in range(NODES) if is_hub(coord, n)] == [4, 8]
    assert list(group_of(coord, 4)) == [5, 6, 7] and list(group_of(coord, 8)) == [9, 10, 11]
    assert hub_port(coord, 4) == 7001 and hub_port(coord, 8) == 7002
    assert coordination_from_dict(coord.to_dict()) == coord
    assert "hub_group" not in Coordination(host="h", port=1, nodes=2, index=0, job=JOB).to_dict()
    assert hub_group(HUBS_FROM, 0) == 0 and hub_group(HUBS_FROM + 1, 0) == HUB_GROUP
    assert hub_group(4096, 3) == 0  # node 0 not the leader: no hubs
    none = Coordination(host="h", port=1, nodes=NODES, index=0, job=JOB)
    assert all(hub_of(none, n) is None and not is_hub(none, n) for n in range(NODES))


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    coord = Coordination(
        host="127.0.0.1", port=0, nodes=NODES, index=0, job=JOB, slots=SLOTS, hub_group=GROUP
    )
    made = Coordinator(coord, SECRET)  # its thread never runs: the test drives it
    yield made
    for conn in list(made.port.conns):
        made.port.drop(conn)
    made.port.server.close()
    made.port.sel.close()


class Node:
    """A node's relay, as node 0 sees it: one connection, its slots' hellos in one line."""

    def __init__(self, coordinator: Coordinator, node: int) -> None:
        ours, self.sock = socket.socketpair()
        coordinator.port.take(ours, f"127.0.0.{node + 1}")
        self.port, self.node, self.mine, self.seq = coordinator.port, node, new_nonce(), 0
        self.conn: Conn = next(c for c in coordinator.port.conns if c.sock is ours)
        said = {"host": "h", "instance": new_nonce(), "version": PROTOCOL}
        self.say("hellos", nonce=self.mine, hellos=[{**said, "slot": s} for s in range(SLOTS)])
        assert set(self.conn.lanes) == set(range(SLOTS)) and self.conn.node == node
        self.sock.setblocking(False)

    def say(self, kind: str, **fields: Any) -> None:
        body = {"job": JOB, "node": self.node, "slot": 0, "type": kind, "peer": self.conn.nonce,
                "seq": self.seq, **fields}  # fmt: skip
        self.seq += 1
        self.sock.sendall(encode(SECRET, body))
        self.port.read(self.conn)

    def heard(self) -> list[str]:
        """The types of node 0's lines since the last look."""
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return []
        return [decode(SECRET, JOB, line)["type"] for line in data.split(b"\n") if line]


def group_beats(*nodes: int) -> list[list[Any]]:
    """A `groupbeats` line's entries (protocol 7): one a node, its slots' idles in a list."""
    return [[n, [0.5] * SLOTS, None, None] for n in nodes]


def test_a_hubs_groupbeats_speak_for_its_group_and_node_0s_heartbeats_go_through_it(
    coordinator: Coordinator,
) -> None:
    nodes = {n: Node(coordinator, n) for n in (0, 4, 5, 6, 7)}
    for node in nodes.values():
        node.heard()  # (challenge, welcomes)
    members = coordinator.members
    before = {key: members[key].last_seen for key in members}
    nodes[4].say("groupbeats", nodes=group_beats(5, 6))
    assert all(nodes[n].conn in coordinator.port.conns for n in nodes)  # nothing refused
    for n in (5, 6):
        assert nodes[n].conn.via_hub is nodes[4].conn
        for s in range(SLOTS):
            assert members[(n, s)].last_seen > before[(n, s)] and members[(n, s)].idle == 0.5
    assert nodes[7].conn.via_hub is None and members[(7, 0)].last_seen == before[(7, 0)]
    assert nodes[4].conn.children == {nodes[5].conn, nodes[6].conn}
    # An interval on: node 0's heartbeats go to every node but those its hub spoke for.
    every = coordinator.hb_every
    for n in (5, 6):  # (their hub spoke for them just now: as if a moment before the tick)
        nodes[n].conn.via_at = time.monotonic() + every
    coordinator.port.tick(time.monotonic() + every + 0.01)
    assert {n: nodes[n].heard() for n in nodes} == {0: ["hb"], 4: ["hb"], 5: [], 6: [], 7: ["hb"]}
    assert coordinator.port.unheard(time.monotonic()) < every  # (5 and 6 heard it via 4)


def test_a_node_beating_node_0_itself_again_has_its_heartbeat_at_once(
    coordinator: Coordinator,
) -> None:
    hub, child = Node(coordinator, 4), Node(coordinator, 5)
    hub.say("groupbeats", nodes=group_beats(5))
    child.heard()
    child.conn.last_out -= coordinator.hb_every  # (node 0's last line to it: an interval ago)
    child.say("beats", beats=[[s, 0.0, None, None] for s in range(SLOTS)])
    assert child.conn.via_hub is None and hub.conn.children == set()
    assert child.heard() == ["hb"]


def test_a_hub_gone_sends_its_group_node_0s_heartbeat_at_once(coordinator: Coordinator) -> None:
    hub, five, six = Node(coordinator, 4), Node(coordinator, 5), Node(coordinator, 6)
    hub.say("groupbeats", nodes=group_beats(5, 6))
    for node in (five, six):
        node.heard()
        node.conn.last_out -= coordinator.hb_every
    coordinator.port.drop(hub.conn)
    assert five.heard() == ["hb"] and six.heard() == ["hb"]
    assert five.conn.via_hub is None and six.conn.via_hub is None


@pytest.mark.parametrize(
    ("sender", "entries", "why"),
    [
        (5, group_beats(6), "not a hub"),  # a node that is not a hub
        (4, group_beats(9), "not of this hub's group"),  # another group's node
        (4, group_beats(4), "not of this hub's group"),  # the hub's own: its own `beats` say it
        (4, [[5, [0.0] * (SLOTS + 1), None, None]], "one item per slot"),
        (4, [[5, [0.0] * SLOTS, [1.0], None]], "one item per slot"),
        (4, [[5, None, None, None]], "one item per slot"),
        (4, group_beats(5, 5), "node 5 twice"),
        (4, [[5, [0.0, None], [1.0, 2.0], None]], "of a slot that did not beat"),
        (4, [[5, [float("nan"), 0.0], None, None]], "not a number"),  # (json.loads takes NaN)
        (4, [[5, [True, 0.0], None, None]], "not a number"),
        (4, [[5, [0.0, "1"], None, None]], "not a number"),  # (idles alone: the short check)
        (4, [[5, [0.0, float("inf")], None, None]], "not a number"),
        (4, [[5, [0.0, 0.0], None, [None, 3]]], "not an object"),
        (4, [[5, 0, 0.0, None, None]], "not [node, idles, cpus, steps]"),  # protocol 6's
    ],
)
def test_groupbeats_from_a_node_not_a_hub_or_for_another_group_are_refused(
    coordinator: Coordinator, sender: int, entries: list[list[Any]], why: str
) -> None:
    refused: list[str] = []
    coordinator.port.refusals._log = lambda *a, **kw: refused.append(str(kw.get("reason")))
    nodes = {n: Node(coordinator, n) for n in (4, 5, 6, 9)}
    nodes[sender].say("groupbeats", nodes=entries)
    assert nodes[sender].conn not in coordinator.port.conns
    assert len(refused) == 1 and why in refused[0], refused


def test_entries_for_a_member_node_0_does_not_hold_are_passed_over(
    coordinator: Coordinator,
) -> None:
    hub, five = Node(coordinator, 4), Node(coordinator, 5)
    coordinator.port.drop(five.conn)  # node 5's connection closed (its slots reconnect)
    hub.say("groupbeats", nodes=group_beats(5, 7))  # 7 never said hello
    assert hub.conn in coordinator.port.conns and hub.conn.children == set()


def test_after_node_0s_own_stall_a_node_behind_a_hub_heard_it_until_the_stall(
    coordinator: Coordinator,
) -> None:
    """Node 0 frozen (SIGSTOP) for longer than its hubs' word stays fresh: the nodes behind a
    hub heard node 0 through it until the freeze, not since node 0's last line to them (which
    may be the job's start): the stall is judged by the freeze, as without hubs."""
    hub, child = Node(coordinator, 4), Node(coordinator, 5)
    hub.say("groupbeats", nodes=group_beats(5))
    now = time.monotonic()
    child.conn.last_out = now - 500.0  # node 0's last line of its own to it: long ago
    hub.conn.last_out = now  # (its heartbeat to the hub, handed on)
    frozen = 100.0
    unheard = coordinator.port.unheard(now + frozen)
    assert frozen <= unheard < frozen + 1.0, unheard


def test_the_hubs_group_size_is_part_of_the_jobs_id() -> None:
    """Every node of a job must take the same group size: one that took another has another
    job id, and is refused at its hello as another job's marun (one line each side), not left
    beating a node 0 that does not take its hub's lines. A job without hubs keeps its id."""
    from marun.plan.build_coordination import job_id

    same = ("job", "ascend", "10.0.0.1", 36668, 2048, 8, ())
    assert job_id(*same) == job_id(*same, (), 0)
    assert job_id(*same, (), 64) != job_id(*same) and job_id(*same, (), 64) != job_id(*same, (), 8)


def test_a_hub_sends_one_entry_a_node_with_each_slots_last_heartbeat() -> None:
    """The hub's side of protocol 7's `groupbeats`: each node's slots' last heartbeats since
    the last line in one entry ([node, idles, cpus, steps]); a slot that did not beat is null,
    and cpus and steps are lists only where a slot had one. Node 0 takes what it sends."""
    import selectors

    from marun.job.hub_link import HubServer
    from marun.job.limits import RefusalLog
    from marun.job.relay_side import group_beats_of
    from marun.sim.ports import free_port

    coord = Coordination(
        host="127.0.0.1", port=free_port(), nodes=NODES, index=4, job=JOB, slots=SLOTS,
        hub_group=GROUP,
    )  # fmt: skip
    sel, sent = selectors.DefaultSelector(), []
    hub = HubServer(coord, SECRET, sel, 1.0, lambda body: sent.append(body) or True,
                    RefusalLog(lambda *a, **kw: None), lambda *a, **kw: None)  # fmt: skip
    try:
        hub._take(5, [(0, 2.0, None, None), (1, 0.0, None, None)])
        hub._take(6, [(1, 1.0, 7.5, None)])
        hub._take(5, [(0, 3.0, None, {"ranks": []})])  # slot 0 again: its last one counts
        hub.tick(time.monotonic() + 1.0)
        assert sent == [{"type": "groupbeats", "nodes": [
            [5, [3.0, 0.0], None, [{"ranks": []}, None]],
            [6, [None, 1.0], [None, 7.5], None],
        ]}]  # fmt: skip
        taken = group_beats_of(sent[0]["nodes"], range(5, 8), SLOTS)
        assert taken == [(5, [3.0, 0.0], None, [{"ranks": []}, None]),
                         (6, [None, 1.0], [None, 7.5], None)]  # fmt: skip
        hub.tick(time.monotonic() + 2.0)
        assert len(sent) == 1  # nothing new: no line
    finally:
        hub.close_links()
        if hub.listener is not None:
            hub.listener.close()
        sel.close()


def test_a_hubs_entry_refreshes_the_slots_that_beat_and_takes_their_cpu(
    coordinator: Coordinator,
) -> None:
    hub, five = Node(coordinator, 4), Node(coordinator, 5)
    members = coordinator.members
    before = {s: members[(5, s)].last_seen for s in range(SLOTS)}
    hub.say("groupbeats", nodes=[[5, [0.25, None], [4.5, None], None]])
    assert members[(5, 0)].last_seen > before[0] and members[(5, 0)].idle == 0.25
    assert list(members[(5, 0)].cpu_history)[-1][1] == 4.5
    assert members[(5, 1)].last_seen == before[1] and len(members[(5, 1)].cpu_history) == 0
    assert five.conn.via_hub is hub.conn


def test_a_groupbeats_line_is_taken_a_node_at_a_time_each_idle_a_float_at_least_0() -> None:
    """Node 0 takes a hub's line a node at a time (no object a slot); an idle an integer or below
    0 on the wire is the same float its node's own `beats` line would give it."""
    from marun.job.relay_side import group_beats_of

    taken = group_beats_of(
        [
            [5, [1, -2.0, None, 0.5], None, None],
            [6, [0, None, 3, -1], [1, None, 2.5, 0], None],
            [7, [-0.0, None, None, None], None, None],
        ],
        range(4, 8),
        4,
    )
    assert taken == [
        (5, [1.0, 0.0, None, 0.5], None, None),
        (6, [0.0, None, 3.0, 0.0], [1.0, None, 2.5, 0.0], None),
        (7, [0.0, None, None, None], None, None),
    ]
    assert str(taken[2][1][0]) == "0.0"  # (not -0.0: the same as a node's own `beats` gives)
    for _, idles, cpus, _ in taken:
        assert all(type(v) is float for v in [*idles, *(cpus or [])] if v is not None)
