"""The job's coordination (marun.job) on loopback with real sockets: a coordinator and members
in this process, as node 0's and the other nodes' marun hold them."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import free_port
from marun.exit_codes import LOST_EXIT
from marun.job import machine
from marun.job.coordinator import Coordinator
from marun.job.member import Member
from marun.job.protocol import PROTOCOL, ProtocolError, decode, encode, fresh, new_nonce
from marun.plan.coordination import Coordination
from marun.runtime.failure import Failure
from marun.runtime.joblink import JobEvent

SECRET = b"s3cret"


def coordination(index: int, port: int, **kw: object) -> Coordination:
    base: dict[str, object] = dict(
        host="127.0.0.1",
        port=port,
        nodes=3,
        index=index,
        job="job-a",
        arrival_timeout=3.0,
        peer_timeout=2.0,
    )
    base.update(kw)
    return Coordination(**base)  # type: ignore[arg-type]


def events(member: Member, kind: str, timeout: float = 10.0) -> JobEvent:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in member.poll():
            if event.kind == kind:
                return event
        time.sleep(0.05)
    raise AssertionError(f"no {kind} event within {timeout}s")


def end_all(members: list[Member], codes: list[int]) -> dict[int, int]:
    """Every node reports its end at once (each waits for the job's); their job codes."""
    import threading

    got: dict[int, int] = {}

    def end(i: int) -> None:
        got[i] = members[i].report_end("failed" if codes[i] else "succeeded", codes[i])

    threads = [threading.Thread(target=end, args=(i,)) for i in range(len(members))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return got


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    made: list[Member] = []
    yield made
    for m in made:
        m.close()


def start_members(
    port: int, made: list[Member], indexes: list[int], report_dir: str | None = None, **kw: object
) -> None:
    coordinator = Coordinator(coordination(0, port, **kw), SECRET, report_dir=report_dir).start()
    for i in indexes:
        made.append(
            Member(
                coordination(i, port, **kw),
                SECRET,
                f"h{i}",
                coordinator=coordinator if i == 0 else None,
            )
        )


def test_messages_are_signed_and_of_this_job() -> None:
    line = encode(SECRET, {"job": "job-a", "node": 1, "slot": 0, "type": "hb"})
    assert decode(SECRET, "job-a", line)["type"] == "hb"
    with pytest.raises(ProtocolError, match="signature"):
        decode(b"other", "job-a", line)
    with pytest.raises(ProtocolError, match="job id"):
        decode(SECRET, "job-b", line)
    with pytest.raises(ProtocolError):
        decode(SECRET, "job-a", b'{"type": "stop"}')


def test_a_line_must_answer_this_connection_and_come_after_the_last() -> None:
    ours = new_nonce()
    assert fresh({"peer": ours, "seq": 0}, ours, -1) == 0
    for body, why in (
        ({"peer": new_nonce(), "seq": 5}, "not of this connection"),
        ({"seq": 5}, "not of this connection"),
        ({"peer": ours, "seq": 3}, "not after 3"),
        ({"peer": ours, "seq": True}, "sequence number True"),
        ({"peer": ours}, "sequence number None"),
    ):
        with pytest.raises(ProtocolError, match=why):
            fresh(body, ours, 3)


class Recorder:
    """A member of node 2 speaking the protocol by hand: what an eavesdropper on its
    connection would have recorded."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        first = self.sock.recv(1 << 16).split(b"\n")[0]
        challenge = decode(SECRET, "job-a", first)
        assert challenge["type"] == "challenge"
        self.peer = str(challenge["nonce"])
        self.mine = new_nonce()
        self.seq = 0

    def line(self, kind: str, **fields: object) -> bytes:
        body = {"job": "job-a", "node": 2, "slot": 0, "type": kind, "peer": self.peer}
        body.update(fields, seq=self.seq)
        self.seq += 1
        return encode(SECRET, body)


def test_recorded_lines_do_not_work_again(
    port: int, members: list[Member], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines signed with the job's secret and recorded off one connection (node 2's hello and
    a failure) are refused on another, and a line repeated on its own connection is refused:
    the job never stops. (CLOSED_LOST is raised for the test: node 2's connections close and
    open again, and how soon a closed one is a loss is not what it asserts.)"""
    monkeypatch.setattr(machine, "CLOSED_LOST", 60.0)
    start_members(port, members, [0, 1], peer_timeout=60.0)  # node 2 may go quiet here
    coordinator = members[0].coordinator
    assert coordinator is not None
    first = Recorder(port)
    hello = first.line("hello", host="h2", nonce=first.mine, version=PROTOCOL)
    failure = first.line("failure", failure={"exit_code": 9, "why": "replayed"})
    first.sock.sendall(hello)  # node 2 arrives for real: every node starts
    for m in members:
        events(m, "start")
    first.sock.close()
    before = coordinator.refused
    second = Recorder(port)
    second.sock.sendall(hello + failure)  # replayed into another connection
    time.sleep(0.5)
    assert coordinator.refused == before + 1  # the hello, and the connection dropped
    second.sock.close()
    third = Recorder(port)
    again = third.line("hello", host="h2", nonce=third.mine, version=PROTOCOL)
    third.sock.sendall(again + again)  # the same line twice on its own connection
    time.sleep(0.5)
    assert coordinator.refused == before + 2
    third.sock.close()
    time.sleep(0.5)
    assert coordinator.stopped is None
    assert all(e.kind != "stop" for m in members for e in m.poll())


def test_start_only_when_every_node_arrived(port: int, members: list[Member]) -> None:
    start_members(port, members, [0, 1])
    time.sleep(0.5)
    assert all(e.kind != "start" for m in members for e in m.poll())
    start_members_late = Member(coordination(2, port), SECRET, "h2")
    members.append(start_members_late)
    for m in members:
        events(m, "start")


def test_missing_node_stops_everyone_naming_it(port: int, members: list[Member]) -> None:
    start_members(port, members, [0, 1])
    for m in members:
        stop = events(m, "stop")
        assert stop.code == LOST_EXIT
        assert stop.failure is not None and "node 2" in str(stop.failure.why)


def test_first_failure_reaches_every_node(port: int, members: list[Member], tmp_path: Path) -> None:
    start_members(port, members, [0, 1, 2], report_dir=str(tmp_path))
    for m in members:
        events(m, "start")
    members[2].report_failure(Failure(name="rank4", rank=4, exit_code=3, tail=("boom",)))
    for m in members:
        stop = events(m, "stop")
        assert stop.code == 3
        assert stop.failure is not None
        assert (stop.failure.node, stop.failure.rank) == (2, 4)
    assert end_all(members, [143, 143, 3]) == {0: 3, 1: 3, 2: 3}
    report = json.loads((tmp_path / "job.json").read_text())
    assert report["exit_code"] == 3 and report["first_failure"]["rank"] == 4
    assert [n["slots"][0]["outcome"] for n in report["nodes"]] == ["failed"] * 3


def test_a_silent_node_counts_as_lost(port: int, members: list[Member]) -> None:
    start_members(port, members, [0, 1, 2])
    for m in members:
        events(m, "start")
    members[1].close()  # its marun is gone: no end, no heartbeat
    for m in (members[0], members[2]):
        stop = events(m, "stop")
        assert stop.code == LOST_EXIT and "node 1" in str(stop.failure and stop.failure.why)


def test_forged_messages_are_refused(port: int, members: list[Member]) -> None:
    start_members(port, members, [0, 1, 2])
    for m in members:
        events(m, "start")
    for secret, job in ((b"guess", "job-a"), (SECRET, "job-b")):
        with socket.create_connection(("127.0.0.1", port)) as s:
            for kind in ("hello", "failure"):
                s.sendall(
                    encode(
                        secret,
                        {
                            "job": job,
                            "node": 1,
                            "slot": 0,
                            "type": kind,
                            "failure": {"exit_code": 9},
                        },
                    )
                )
            time.sleep(0.3)
    time.sleep(1.0)
    assert all(e.kind != "stop" for m in members for e in m.poll())
    coordinator = members[0].coordinator
    assert coordinator is not None and coordinator.refused >= 2
    assert coordinator.stopped is None


def test_success_everywhere_is_done_with_zero(
    port: int, members: list[Member], tmp_path: Path
) -> None:
    start_members(port, members, [0, 1, 2])
    for m in members:
        events(m, "start")
    assert end_all(members, [0, 0, 0]) == {0: 0, 1: 0, 2: 0}


class HandLeader:
    """Node 0's port speaking the protocol by hand, so that the test says when node 0 talks."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(10)
        self.port = self.server.getsockname()[1]
        self.instance = new_nonce()
        self.peer: str | None = None
        self.seq = 0

    def take(self) -> None:
        """The member's connection: challenge, its hello, a welcome."""
        self.sock, _ = self.server.accept()
        self.sock.settimeout(10)
        self.say("challenge", instance=self.instance, version=PROTOCOL, nonce=new_nonce())
        hello = decode(SECRET, "job-a", self.sock.makefile("rb").readline())
        assert hello["type"] == "hello"
        self.peer = str(hello["nonce"])
        self.say("welcome", instance=self.instance, wall=round(time.time(), 3))

    def say(self, kind: str, **fields: object) -> None:
        body = {"job": "job-a", "node": 0, "slot": 0, "type": kind, **fields}
        self.sock.sendall(encode(SECRET, {**body, "peer": self.peer, "seq": self.seq}))
        self.seq += 1

    def close(self) -> None:
        self.sock.close()
        self.server.close()


# What node 0 says while the member does not run: a heartbeat; the job's stop (a node lost);
# a restart round (a node lost, with rounds)
NODE_2_LOST = Failure(node=2, host="h2", exit_code=LOST_EXIT, why="node 2 (h2) lost")
SAID_DURING = {
    "hb": {},
    "stop": {"code": LOST_EXIT, "failure": NODE_2_LOST.to_wire()},
    "restart": {"round": 1, "cause": NODE_2_LOST.to_wire()},
}


@pytest.mark.parametrize("said", sorted(SAID_DURING))
def test_a_member_that_did_not_run_hears_node_0s_waiting_lines_before_judging_it(
    monkeypatch: pytest.MonkeyPatch, said: str
) -> None:
    """A running member's thread stops for 2.5 s right after a read that found nothing (frozen
    or starved: under its 3 s stall mark, so no credit for it), 1 s after node 0's last line,
    with peer_timeout 3 s. Node 0 spoke 0.5 s into that stop (a heartbeat, the job's stop for a
    lost node, or a restart round): its line waits in the socket and is read before the
    member's next turn judges node 0's silence (3.5 s since the line before, past
    peer_timeout). The member takes node 0's word; it does not give up on a node 0 that talks."""
    leader = HandLeader()
    stop_after: list[float] = []  # monotonic: the first read after this stops the thread
    stopped = threading.Event()
    real = Member._read_leader

    def read_then_stop(self: Member, sock: socket.socket, *args: Any, **kw: Any) -> None:
        real(self, sock, *args, **kw)
        if stop_after and time.monotonic() >= stop_after[0] and not stopped.is_set():
            stopped.set()
            time.sleep(2.5)

    monkeypatch.setattr(Member, "_read_leader", read_then_stop)
    coord = coordination(1, leader.port, nodes=2, peer_timeout=3.0, arrival_timeout=60.0)
    logged: list[tuple[str, str]] = []
    member = Member(
        coord, SECRET, "h1", log=lambda event, level="info", **_: logged.append((event, level))
    )
    heard: list[JobEvent] = []
    try:
        leader.take()
        leader.say("start")
        stop_after.append(time.monotonic() + 1.0)  # (node 0's last line: its start, now)
        assert stopped.wait(5.0), "the member's thread reads again within the guard"
        time.sleep(0.5)
        leader.say(said, **SAID_DURING[said])  # node 0 talks while the member does not run
        deadline = time.monotonic() + 4.0  # past the stop's end, and past peer_timeout again
        while time.monotonic() < deadline:
            heard += member.poll()
            with contextlib.suppress(OSError):  # (a member that gave up closed its end)
                leader.say("hb")  # (node 0 beats on after its stop too, until the job is done)
            time.sleep(0.3)
        kinds = [e.kind for e in heard]
        assert kinds == ["start", *([] if said == "hb" else [said])], heard
        if said != "hb":
            failure = heard[-1].failure
            assert failure is not None and failure.node == 2, heard  # node 0's word, not its own
        assert not member.machine.gave_up
        assert [e for e, level in logged if level == "error"] == []
    finally:
        member.close()
        leader.close()
