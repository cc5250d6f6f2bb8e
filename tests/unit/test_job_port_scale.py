"""What lets node 0's port take 8,192 marun processes (docs/performance.md, "The job's
coordination at scale"), each on its own: the roster's per-node counts, the heartbeat interval,
sends that never wait on a member (a member that reads nothing is dropped, bounded), connections
without a hello dropped from their queue, the listen backlog. A real coordinator whose thread
never runs, real sockets (socket pairs) driven by the coordinator's own code; the clock is moved
by setting the times the coordinator compares, nothing sleeps.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from marun.job.conns import Conn
from marun.job.coordinator import Coordinator
from marun.job.heartbeat import Beat, heartbeat_interval
from marun.job.limits import HELLO_WAIT, OUTPUT_LIMIT, SLOW_READER, listen_backlog
from marun.job.messages import Dump, Refused
from marun.job.protocol import PROTOCOL, decode, encode, fresh, new_nonce
from marun.job.roster import MemberState, Roster
from marun.plan.coordination import Coordination

SECRET = b"scale-secret"
JOB = "job-s"


def state(node: int, slot: int) -> MemberState:
    return MemberState(node=node, slot=slot, host="h", address="a", arrived=0.0, last_seen=0.0)


def test_the_roster_counts_complete_nodes_whoever_changes_it() -> None:
    roster = Roster(slots=2)
    roster[(0, 0)] = state(0, 0)
    assert not roster.node_complete(0) and roster.complete == 0
    roster[(0, 1)] = state(0, 1)
    roster[(0, 1)] = state(0, 1)  # the same member again: counted once
    assert roster.node_complete(0) and roster.complete == 1 and len(roster) == 2
    roster[(1, 0)] = state(1, 0)
    roster[(1, 1)] = state(1, 1)
    assert roster.complete == 2
    del roster[(0, 0)]
    assert not roster.node_complete(0) and roster.complete == 1
    assert roster.pop((1, 1)).slot == 1 and roster.complete == 0
    roster.update({(1, 1): state(1, 1)})
    assert roster.complete == 1 and roster.get((9, 9)) is None
    roster.clear()
    assert roster.complete == 0 and len(roster) == 0 and not roster.node_complete(1)


def test_the_heartbeat_interval_does_not_grow_the_rate_with_the_job() -> None:
    assert heartbeat_interval(3, 60.0) == 1.0  # a small job: one a second, as before
    assert heartbeat_interval(8192, 3.0) == 1.0  # never less often than 3 per peer_timeout...
    assert heartbeat_interval(8192, 60.0) == 20.0  # ...and never more than one a second
    assert heartbeat_interval(8192, 60.0, 40.0) == 10.0  # 4 CPU figures per hang_timeout
    assert heartbeat_interval(1024, 600.0) == 4.0  # between: about 256 a second into node 0
    small = Coordination(host="h", port=1, nodes=3, index=1, job=JOB)
    beat = Beat(small)
    assert beat.due(100.0) and not beat.due(100.5) and beat.due(101.0)
    large = Coordination(host="h", port=1, nodes=1024, index=1, job=JOB, slots=8)
    firsts = []
    for _ in range(50):
        beat = Beat(large)
        first = next(t / 10 for t in range(1000) if beat.due(100.0 + t / 10))
        firsts.append(first)
        assert not beat.due(first + 100.0 + 19.9) and beat.due(first + 100.0 + 20.0)
    assert max(firsts) - min(firsts) > 1.0  # spread over the interval, not all at once


def test_the_listen_backlog_holds_the_whole_job_as_far_as_the_kernel_lets_it() -> None:
    assert listen_backlog(3) == 67
    assert 67 < listen_backlog(8192) <= 8192 + 64


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    coord = Coordination(host="127.0.0.1", port=0, nodes=2, index=0, job=JOB)
    made = Coordinator(coord, SECRET)  # its thread never runs: the test drives it
    yield made
    for conn in list(made.port.conns):
        made.port.drop(conn)
    made.port.server.close()
    made.port.sel.close()


def connect(coordinator: Coordinator, node: int) -> tuple[Conn, socket.socket, str]:
    """A member's connection through the coordinator's own accept path, hello said."""
    ours, theirs = socket.socketpair()
    coordinator.port.take(ours, "127.0.0.5")
    conn = next(c for c in coordinator.port.conns if c.sock is ours)
    mine = new_nonce()
    theirs.sendall(encode(SECRET, {"job": JOB, "node": node, "slot": 0, "type": "hello",
                                   "peer": conn.nonce, "seq": 0, "nonce": mine,
                                   "host": "h", "instance": new_nonce(),
                                   "version": PROTOCOL}))  # fmt: skip
    coordinator.port.read(conn)
    assert conn.member == (node, 0)
    return conn, theirs, mine


def test_a_member_that_does_not_read_costs_node_0_no_wait_and_is_dropped(
    coordinator: Coordinator,
) -> None:
    conn, theirs, _ = connect(coordinator, 1)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    began = time.monotonic()
    while not conn.out:  # the socket's buffers fill: the rest waits in conn.out
        coordinator.port.send_conn(conn, Dump(False))
    assert time.monotonic() - began < 5.0  # (no send waited: the old blocking one took 2 s)
    assert conn in coordinator.port.conns and conn.stuck_since is not None
    coordinator.port.tick(time.monotonic())
    assert conn in coordinator.port.conns  # waiting, not for long yet
    coordinator.port.tick(conn.stuck_since + SLOW_READER + 1.0)
    assert conn not in coordinator.port.conns
    assert coordinator.members[(1, 0)].conn is None  # silent from now on: peer_timeout counts
    assert (1, 0) in coordinator.members.closed  # arrival looks at it (before the start)
    theirs.close()


def test_output_beyond_the_limit_drops_the_member(coordinator: Coordinator) -> None:
    conn, theirs, _ = connect(coordinator, 1)
    big = "x" * (1 << 19)
    for _ in range(2 * OUTPUT_LIMIT // len(big) + 8):
        coordinator.port.send_conn(conn, Refused(big))
        if conn not in coordinator.port.conns:
            break
    assert conn not in coordinator.port.conns
    theirs.close()


def test_waiting_output_goes_out_in_order_when_the_member_reads(coordinator: Coordinator) -> None:
    conn, theirs, mine = connect(coordinator, 1)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sent = 0
    while not conn.out or sent < 200:
        coordinator.port.send_conn(conn, Dump(bool(sent % 2)))
        sent += 1
    got: list[bytes] = []
    buf = b""
    theirs.setblocking(False)
    deadline = time.monotonic() + 10.0
    while len(got) < sent + 2 and time.monotonic() < deadline:  # + challenge, welcome
        coordinator.port.flush(conn)
        try:
            buf += theirs.recv(1 << 16)
        except BlockingIOError:
            continue
        *lines, buf = buf.split(b"\n")
        got += lines
    assert not conn.out and conn.stuck_since is None and conn not in coordinator.port.stuck
    seq = -1
    bodies = [decode(SECRET, JOB, line) for line in got]
    assert [b["type"] for b in bodies[:2]] == ["challenge", "welcome"]
    for body in bodies[1:]:
        seq = fresh(body, mine, seq)  # this connection's, one after another: none lost
    assert [b["sample"] for b in bodies[2:]] == [bool(i % 2) for i in range(sent)]
    theirs.close()


def test_a_connection_without_hello_is_dropped_from_its_queue(coordinator: Coordinator) -> None:
    old_ours, old_theirs = socket.socketpair()
    new_ours, new_theirs = socket.socketpair()
    coordinator.port.take(old_ours, "127.0.0.6")
    coordinator.port.take(new_ours, "127.0.0.6")
    old, new = sorted(coordinator.port.conns, key=lambda c: c.opened)
    old.opened -= 1.0  # it came a second earlier
    assert coordinator.port.per_source["127.0.0.6"] == 2
    coordinator.port.tick(old.opened + HELLO_WAIT + 0.5)
    assert old not in coordinator.port.conns and new in coordinator.port.conns
    assert coordinator.port.per_source["127.0.0.6"] == 1
    for sock in (old_theirs, new_theirs):
        sock.close()


def test_a_hello_node_0_has_not_read_yet_keeps_its_connection(coordinator: Coordinator) -> None:
    """At 4,096 nodes node 0 may be seconds behind reading hellos: a connection whose hello
    waits in its socket is not dropped for node 0's lag."""
    ours, theirs = socket.socketpair()
    coordinator.port.take(ours, "127.0.0.6")
    (conn,) = coordinator.port.conns
    theirs.sendall(b'{"body": "{}"')  # (its first bytes: node 0 has read nothing yet)
    coordinator.port.tick(conn.opened + HELLO_WAIT + 0.5)
    assert conn in coordinator.port.conns
    theirs.close()


def test_heartbeats_go_where_nothing_else_went(coordinator: Coordinator) -> None:
    conn, theirs, _ = connect(coordinator, 1)
    every = coordinator.hb_every
    t = time.monotonic() + every + 0.01
    coordinator.port.tick(t)  # its first (at a random point of the first interval): due
    assert conn.seq_out == 3  # challenge, welcome, hb
    coordinator.port.send_conn(conn, Dump(True))
    conn.last_out = t + every / 2  # (the dump went half an interval after the heartbeat)
    coordinator.port.tick(t + every + 0.01)
    assert conn.seq_out == 4  # no heartbeat: the dump showed node 0 alive
    coordinator.port.tick(t + 1.5 * every + 0.01)
    assert conn.seq_out == 5
    theirs.setblocking(False)
    kinds = [decode(SECRET, JOB, line)["type"] for line in theirs.recv(1 << 16).split(b"\n")
             if line]  # fmt: skip
    assert kinds == ["challenge", "welcome", "hb", "dump", "hb"]
    theirs.close()
