"""Liveness hubs, for real in one process (marun.job.hub_link; docs/supervision.md, "Liveness
through hubs"): a real coordinator, 6 nodes of 2 slots in groups of 3, each node's relay and its
real members (threads and sockets). Nodes 4 and 5 beat node 0 through node 3, their hub, and
hear node 0 through it: node 0 sends them no heartbeat of its own, and a failure's stop still
reaches every slot. A hub that stops being one (its listener and links closed), and a hub frozen
until node 0 finds it lost, cost their group nothing: its nodes beat node 0 directly again, and
none of them is found lost. The waits are hang guards only."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import free_ports_after
from marun.exit_codes import LOST_EXIT
from marun.job.coordinator import Coordinator
from marun.job.protocol import PROTOCOL, decode, encode, new_nonce
from marun.plan.coordination import Coordination
from marun.runtime.failure import Failure
from relay_job import GUARD, Job

SECRET = b"hub-secret"
JOB = "job-hubs"
NODES, SLOTS, GROUP = 6, 2, 3  # node 0's group 0-2; node 3 the hub of 4 and 5
# Heartbeats every second (12 maruns); a hub silent for 5 s is left (marun.job.hub_link's
# silent_limit: its floor, where peer_timeout leaves room), so a thread starved for seconds on a
# busy machine does not send a node back to beating node 0 in the middle of a test's look.
PEER_TIMEOUT = 20.0


@pytest.fixture
def job() -> Iterator[Job]:
    port = free_ports_after(1)
    coord = Coordination(
        host="127.0.0.1", port=port, nodes=NODES, index=0, job=JOB, slots=SLOTS,
        peer_timeout=PEER_TIMEOUT, hub_group=GROUP, hub_hosts=("127.0.0.1",),
    )  # fmt: skip
    made = Job(Coordinator(coord, SECRET).start())
    try:
        for index in range(NODES):
            made.add_node(index, SECRET)
        yield made
    finally:
        made.close()


def _conn(job: Job, node: int) -> Any:
    """Node 0's connection of `node` (its slot 0's lane's), or None."""
    member = job.coordinator.members.get((node, 0))
    return None if member is None or member.conn is None else member.conn.conn  # type: ignore[attr-defined]


def _through_hub(job: Job) -> bool:
    hub = _conn(job, 3)
    links = [job.relays[n].link for n in (4, 5)]
    return all(link is not None and link.ready for link in links) and all(
        getattr(_conn(job, n), "via_hub", None) is hub for n in (4, 5)
    )


def test_a_groups_heartbeats_go_through_its_hub_both_ways(job: Job) -> None:
    job.wait(job.started, "every slot hears the start")
    assert job.relays[3].hub is not None and job.relays[3].hub.listener is not None
    assert all(job.relays[n].link is None for n in (0, 1, 2, 3))  # group 0, and the hub
    job.wait(lambda: _through_hub(job), "nodes 4 and 5 beat node 0 through node 3")
    four, five = _conn(job, 4), _conn(job, 5)
    sent = {n: _conn(job, n).seq_out for n in (1, 3, 4, 5)}  # type: ignore[attr-defined]
    seen = {k: m.last_seen for k, m in job.coordinator.members.items()}
    time.sleep(3.5)  # three heartbeat intervals and a half
    assert _through_hub(job) and _conn(job, 4) is four and _conn(job, 5) is five
    after = {n: _conn(job, n).seq_out for n in (1, 3, 4, 5)}  # type: ignore[attr-defined]
    assert after[1] > sent[1] and after[3] > sent[3]  # node 0's heartbeats to 1 and the hub
    assert after[4] == sent[4] and after[5] == sent[5]  # none to 4 and 5: the hub's reach them
    members = job.coordinator.members
    assert all(members[k].last_seen > seen[k] for k in members)  # every slot heard by node 0
    job.poll()
    assert not any(job.heard(k, "stop") for k in job.members)  # node 0 lost to none of them
    job.members[(5, 1)].report_failure(Failure(name="rank11", rank=11, exit_code=3))
    job.wait(lambda: all(job.heard(k, "stop") for k in job.members), "every slot hears the stop")
    assert all(job.heard(k, "stop")[0].code == 3 for k in job.members)
    assert job.coordinator.refused == 0 and all(r.errors == 0 for r in job.relays.values())


def test_a_hub_that_stops_being_one_costs_its_group_nothing(job: Job) -> None:
    job.wait(lambda: job.started() and _through_hub(job), "nodes 4 and 5 beat through node 3")
    hub = job.relays[3].hub
    assert hub is not None
    hub.close()  # (in its relay's thread's stead: the test holds no lock of it; it only closes)

    def direct() -> bool:
        links = [job.relays[n].link for n in (4, 5)]
        conns = [_conn(job, n) for n in (4, 5)]
        return all(link is not None and not link.ready for link in links) and all(
            c is not None and getattr(c, "via_hub", 1) is None for c in conns
        )

    job.wait(direct, "nodes 4 and 5 beat node 0 directly again")
    time.sleep(PEER_TIMEOUT + 1.0)  # longer than a silent node would be kept
    job.poll()
    members = job.coordinator.members
    assert all(m.outcome is None for m in members.values()), {
        k: m.outcome for k, m in members.items()
    }
    assert not any(job.heard(k, "stop") for k in job.members)


def test_a_frozen_hub_is_lost_alone(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    """Node 3's relay stops running (its node frozen): node 0 finds node 3 lost, and nodes 4
    and 5, whose heartbeats went through it, are not: they left it and beat node 0 directly.
    Each of node 3's slots is lost when its own silence passes peer_timeout: the relay's last
    line may have carried one slot's heartbeat and not the other's (each slot beats at its own
    point of the interval), so the two may be found an interval apart, the stop after the
    first. What node 0 found is read before the thaw: the relay's lines after it count node 3
    back."""
    job.wait(lambda: job.started() and _through_hub(job), "nodes 4 and 5 beat through node 3")
    relay, thaw = job.relays[3], threading.Event()
    turn = relay._turn
    monkeypatch.setattr(relay, "_turn", lambda: thaw.wait(GUARD) and turn())
    lost: list[tuple[int, int]] = []

    def node_3_lost() -> bool:
        members = list(job.coordinator.members.items())
        lost[:] = sorted(k for k, m in members if m.outcome == "lost")
        return bool(job.heard((0, 0), "stop")) and {(3, 0), (3, 1)} <= set(lost)

    try:
        job.wait(node_3_lost, "node 0 finds node 3's slots lost")
    finally:
        thaw.set()
    stop = job.heard((0, 0), "stop")[0]
    assert stop.code == LOST_EXIT and stop.failure is not None
    assert "node 3" in (stop.failure.why or ""), stop.failure.why
    assert lost == [(3, 0), (3, 1)], lost


def test_a_stranger_on_a_hubs_port_is_refused_with_one_line_and_changes_nothing(
    job: Job,
) -> None:
    """Garbage, a line of another node's group, and a silent connection on the hub's port: each
    refused (one line in the hub's log, counted) and closed; the group's links stay."""
    job.wait(lambda: job.started() and _through_hub(job), "nodes 4 and 5 beat through node 3")
    relay = job.relays[3]
    hub = relay.hub
    assert hub is not None and hub.listener is not None
    port = hub.listener.getsockname()[1]
    before = relay.refusals.total
    links = dict(hub.children)

    def refused_and_closed(sock: socket.socket) -> None:
        sock.settimeout(GUARD)
        while sock.recv(1 << 16):  # (its challenge), then the close
            pass

    garbage = socket.create_connection(("127.0.0.1", port))
    garbage.sendall(b"GET / HTTP/1.0\r\n\r\n")
    refused_and_closed(garbage)
    other = socket.create_connection(("127.0.0.1", port))
    challenge = decode(SECRET, JOB, other.recv(1 << 16).split(b"\n")[0])
    other.sendall(encode(SECRET, {"job": JOB, "node": 1, "slot": 0, "type": "hublink",
                                  "nonce": new_nonce(), "version": PROTOCOL,
                                  "peer": challenge["nonce"], "seq": 0}))  # fmt: skip
    refused_and_closed(other)
    job.wait(lambda: relay.refusals.total >= before + 2, "the hub counts both refusals")
    assert all(side in hub.children for side in links) and _through_hub(job)
    assert relay.errors == 0 and job.coordinator.refused == 0
