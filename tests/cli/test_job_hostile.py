"""Node 0's job port under hostile input, through real sockets: malformed lines, another job's
marun, floods of connections and bytes. Nothing that arrives may end the coordinator or stop a
running job, and what the network may cost node 0 is bounded (marun.job.limits).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import free_port
from marun.job.coordinator import Coordinator
from marun.job.limits import HELLO_WAIT, REFUSAL_WINDOW, REFUSALS_LOGGED, per_source_limit
from marun.job.member import Member
from marun.job.protocol import MAX_HELLO_LINE
from marun.plan.coordination import Coordination

SECRET = b"s3cret"


class Log:
    """The log callable marun gives the coordinator and members: events kept, thread-safe."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        with self._lock:
            self.events.append((event, level, fields))

    def named(self, event: str) -> list[dict[str, Any]]:
        with self._lock:
            return [f for e, _, f in self.events if e == event]


def coordination(index: int, port: int, **kw: Any) -> Coordination:
    base: dict[str, Any] = dict(
        host="127.0.0.1",
        port=port,
        nodes=3,
        index=index,
        job="job-a",
        arrival_timeout=30.0,
        peer_timeout=30.0,
    )
    base.update(kw)
    return Coordination(**base)


class Job:
    def __init__(self, port: int, report_dir: str | None = None, **kw: Any) -> None:
        self.log = Log()
        self.coordinator = Coordinator(
            coordination(0, port, **kw),
            SECRET,
            log=self.log,
            announce=lambda _: None,
            report_dir=report_dir,
        ).start()
        self.members = [
            Member(
                coordination(i, port, **kw),
                SECRET,
                f"h{i}",
                coordinator=self.coordinator if i == 0 else None,
                log=self.log,
            )
            for i in range(3)
        ]

    def started(self) -> None:
        for m in self.members:
            wait_event(m, "start")

    def end(self, tmp: Path) -> dict[int, int]:
        got: dict[int, int] = {}

        def end(i: int) -> None:
            got[i] = self.members[i].report_end("succeeded", 0)

        threads = [threading.Thread(target=end, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        return got

    def close(self) -> None:
        for m in self.members:
            m.close()


def wait_event(member: Member, kind: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.kind == kind for e in member.poll()):
            return
        time.sleep(0.05)
    raise AssertionError(f"no {kind} within {timeout}s")


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    made = Job(free_port(), report_dir=str(tmp_path))
    yield made
    made.close()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def challenged(sock: socket.socket) -> bool:
    """Whether node 0 sent its challenge (else it closed at once: refused)."""
    try:
        return sock.recv(1 << 16).startswith(b"{")
    except OSError:
        return False


def until_closed(sock: socket.socket) -> None:
    try:
        while sock.recv(1 << 16):
            pass
    except OSError:
        pass
    sock.close()


MALFORMED = [
    b"[" * 100_000,
    b'{"body":"\\ud800","mac":"00"}',
    '{"body":"{}","mac":"é'.encode() + b'"}',
    b'{"body":"{}","mac":"' + "é".encode() * 32 + b'"}',
    b'{"body":["x"],"mac":{}}',
    b"\xff\xfe\xfd",
    b"{" * 10,
]


def test_malformed_lines_from_a_real_socket_do_not_end_the_job(job: Job, tmp_path: Path) -> None:
    job.started()
    port = job.coordinator.coord.port
    for line in MALFORMED:
        sock = connect(port)
        assert challenged(sock)
        sock.sendall(line + b"\n")
        until_closed(sock)  # refused: node 0 closed the connection
    time.sleep(1.5)  # heartbeats go on meanwhile
    assert job.coordinator._thread.is_alive()
    assert job.coordinator.errors == 0
    assert job.coordinator.stopped is None
    assert job.coordinator.refused == len(MALFORMED)
    assert job.end(tmp_path) == {0: 0, 1: 0, 2: 0}
    report = json.loads((tmp_path / "job.json").read_text())
    assert report["exit_code"] == 0 and report["refused_messages"] == len(MALFORMED)


def test_a_member_of_another_job_is_refused_at_its_hello(job: Job) -> None:
    job.started()
    port = job.coordinator.coord.port
    log = Log()
    stranger = Member(coordination(1, port, job="job-b"), SECRET, "b1", log=log)
    try:
        deadline = time.monotonic() + 10
        while not log.named("job_refused") and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # it tries again meanwhile: still one line on its side
        refused = log.named("job_refused")
        assert len(refused) == 1, log.events
        assert "is not this job's 'job-b' (another job's marun)" in refused[0]["reason"]
        ours = [f for f in job.log.named("job_message_refused") if "another job" in f["reason"]]
        assert 1 <= len(ours) <= REFUSALS_LOGGED, job.log.events
        assert job.coordinator.stopped is None
    finally:
        stranger.close()


def test_a_second_marun_for_a_node_that_is_here_is_turned_away(job: Job) -> None:
    """The same job id and secret (two jobs that cannot be told apart by what they were
    given): node 1's place is taken by a marun that talks; the newcomer is refused, and the
    running job goes on."""
    job.started()
    log = Log()
    second = Member(coordination(1, job.coordinator.coord.port), SECRET, "other", log=log)
    try:
        deadline = time.monotonic() + 10
        while not log.named("job_refused") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "is here already" in log.named("job_refused")[0]["reason"], log.events
        assert job.coordinator.stopped is None
        assert all(e.kind != "stop" for m in job.members for e in m.poll())
    finally:
        second.close()


def test_what_a_connection_may_hold_before_its_hello_is_bounded(job: Job) -> None:
    port = job.coordinator.coord.port
    big = connect(port)
    assert challenged(big)
    with pytest.raises(OSError):  # closed by node 0 after MAX_HELLO_LINE bytes
        for _ in range(64):
            big.sendall(b"x" * MAX_HELLO_LINE)
            time.sleep(0.02)
    big.close()
    idle = connect(port)
    assert challenged(idle)
    idle.settimeout(HELLO_WAIT * 4)
    assert idle.recv(10) == b""  # closed: no hello within HELLO_WAIT
    idle.close()
    reasons = [f["reason"] for f in job.log.named("job_message_refused")]
    assert any(f"longer than {MAX_HELLO_LINE} bytes" in r for r in reasons), reasons
    assert any("no hello within" in r for r in reasons), reasons


def test_connections_per_source_are_bounded_and_refusals_summarised(job: Job) -> None:
    port = job.coordinator.coord.port
    limit = per_source_limit(job.coordinator.expected)
    socks = [connect(port, "127.0.0.9") for _ in range(limit + 20)]
    answered = sum(challenged(s) for s in socks)
    assert answered == limit
    for s in socks:
        s.close()
    logged = [f for f in job.log.named("job_message_refused") if f["source"] == "127.0.0.9"]
    assert len(logged) == REFUSALS_LOGGED  # 20 refusals, 3 lines ...
    deadline = time.monotonic() + REFUSAL_WINDOW + 5
    while not job.log.named("job_messages_refused") and time.monotonic() < deadline:
        time.sleep(0.2)
    summary = job.log.named("job_messages_refused")  # ... and one summary of the rest
    assert summary and summary[0]["count"] == 20 - REFUSALS_LOGGED, job.log.events
    assert "too many connections from this address" in summary[0]["reasons"]


OUT_OF_FDS = """\
import json, resource, socket, sys, time
from marun.job.coordinator import Coordinator
from marun.plan.coordination import Coordination
resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
port = int(sys.argv[1])
coordinator = Coordinator(
    Coordination(host="127.0.0.1", port=port, nodes=30, index=0, job="j"), b"k",
    log=lambda event, level="info", **kw: print(event, json.dumps(kw), flush=True),
    announce=lambda _: None,
).start()
print("listening", flush=True)
sys.stdin.readline()  # the test has opened its connections
cpu = time.process_time()
time.sleep(2)
print(f"cpu {time.process_time() - cpu:.2f}", flush=True)
print("wrote", coordinator.write_report(sys.argv[2]), flush=True)
coordinator.close()  # as marun does at its end: the connections go, then the thread
"""


def test_out_of_descriptors_node_0_neither_spins_nor_loses_job_json(tmp_path: Path) -> None:
    """At its file limit (40 here), node 0 takes each waiting connection with the descriptor
    it holds in reserve and closes it, and writes job.json with it."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", OUT_OF_FDS, str(port), str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "listening"
        socks = []
        for i in range(60):  # from many sources: the per-source limit is not what stops them
            with contextlib.suppress(OSError):
                socks.append(connect(port, f"127.0.1.{i + 1}"))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        for s in socks:
            s.close()
    assert proc.returncode == 0, out
    assert "no file descriptor left" in out, out
    assert (tmp_path / "job.json").is_file(), out
    cpu = next(line for line in out.splitlines() if line.startswith("cpu "))
    print(f"node 0 at its file limit with 60 connections waiting: {cpu}s of CPU in 2s")


def test_a_member_survives_whatever_its_node_0_sends(tmp_path: Path) -> None:
    """The member's side: a fake node 0 on a real socket sends malformed challenges, then a
    good one followed by malformed and foreign lines. The member's thread lives on, refuses
    each, and still takes the good `start` that follows."""
    from marun.job.protocol import PROTOCOL, encode, new_nonce

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    log = Log()
    member = Member(coordination(1, port), SECRET, "h1", log=log)
    try:
        for line in MALFORMED[:4]:  # as the challenge: the connection is given up, and retried
            peer, _ = server.accept()
            peer.sendall(line + b"\n")
            peer.close()
        peer, _ = server.accept()
        peer.settimeout(10)
        ours = new_nonce()
        body = {"job": "job-a", "node": 0, "slot": 0}
        challenge = {**body, "type": "challenge", "nonce": ours, "seq": 0, "version": PROTOCOL}
        peer.sendall(encode(SECRET, challenge))
        hello = decode_line(peer.recv(1 << 16))
        assert hello["type"] == "hello"
        theirs = hello["nonce"]
        junk = [*MALFORMED, encode(b"forged", {**body, "type": "stop", "code": 9})]
        peer.sendall(b"\n".join(junk) + b"\n")
        peer.sendall(encode(SECRET, {**body, "type": "start", "peer": theirs, "seq": 1}))
        wait_event(member, "start")
        assert member._thread.is_alive()
        refused = log.named("job_message_refused")
        assert len(refused) >= len(junk), log.events
        assert not log.named("job_member_error"), log.events
        peer.close()
    finally:
        member.close()
        server.close()


def decode_line(data: bytes) -> dict[str, Any]:
    from marun.job.protocol import decode

    return decode(SECRET, "job-a", data.split(b"\n")[0])
