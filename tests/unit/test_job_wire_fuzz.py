"""The job port's wire protocol under arbitrary input (hypothesis): whatever bytes, JSON, field
types and sizes arrive, before or after a connection's hello, node 0's coordinator refuses or
takes them and never raises, and a line that is unsigned or signed for another job never stops
a running job. The lines go through a real socket (a socket pair) into the coordinator's own
reading code; nothing sleeps: no time-out is involved.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marun.job.conns import Conn
from marun.job.coordinator import Coordinator
from marun.job.protocol import PROTOCOL, ProtocolError, decode, encode, new_nonce
from marun.plan.coordination import Coordination

SECRET = b"fuzz-secret"
JOB = "job-f"
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=30),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
kinds = st.sampled_from(
    ["hello", "hb", "failure", "stacks", "end", "challenge", "stop", "done", "refused", "x", ""]
)
fields = st.dictionaries(
    st.sampled_from(
        ["nonce", "host", "instance", "leader", "started", "daemons_only", "idle", "cpu",
         "failure", "text", "outcome", "exit_code", "code", "why", "node", "slot", "peer", "seq"]
    ),
    json_values,
    max_size=6,
)  # fmt: skip
# Lines that break parsers: deep nesting, lone surrogates, non-ASCII MACs, wrong types.
nasty = st.sampled_from(
    [
        b"[" * 100_000,
        b'{"body":' * 50_000,
        b'{"body":"\\ud800","mac":"00"}',
        '{"body":"{}","mac":"é'.encode() + b'"}',
        b'{"body":"{}","mac":"' + b"\xff" * 64 + b'"}',
        b'{"body":1,"mac":2}',
        b'{"body":"[' + b"[" * 5000 + b'","mac":"' + b"0" * 64 + b'"}',
        b"\xff\xfe\x00",
        b"null",
        b"[]",
        b'"x"',
        b"1e999999",
    ]
)


def quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def coordinator() -> Iterator[Coordinator]:
    coord = Coordination(
        host="127.0.0.1", port=0, nodes=3, index=0, job=JOB, arrival_timeout=3600.0
    )
    # Its thread never runs: the test drives its reading.
    made = Coordinator(coord, SECRET, announce=quiet)
    yield made
    made.port.server.close()
    made.port.sel.close()


class Peer:
    """One connection into the coordinator: what the far end writes is read by `_read`, as
    the coordinator's loop does when the selector says the socket is readable."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        ours, theirs = socket.socketpair()
        self.far = theirs
        self.conn = Conn(ours, "127.0.0.9")
        coordinator.port.conns.add(self.conn)
        self.mine = new_nonce()
        self.seq = 0

    def send(self, data: bytes) -> None:
        # Small enough for the socket buffer at once; read as the loop would, chunk by chunk.
        view = memoryview(data)
        while view:
            sent = self.far.send(view[: 1 << 15])
            view = view[sent:]
            self.pump()

    def pump(self) -> None:
        while self.conn in self.coordinator.port.conns:
            self.conn.sock.setblocking(False)
            try:
                peeked = self.conn.sock.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                return
            if not peeked:
                break
            self.coordinator.port.read(self.conn)

    def signed(self, secret: bytes, job: str, kind: str, **extra: Any) -> bytes:
        body: dict[str, Any] = {"job": job, "node": 1, "slot": 0, "type": kind}
        body.update(extra)
        body.setdefault("peer", self.conn.nonce)
        body.setdefault("seq", self.seq)
        self.seq += 1
        return encode(secret, body)

    def hello(self) -> None:
        self.send(
            self.signed(
                SECRET, JOB, "hello", nonce=self.mine, host="h1", instance="i" * 32,
                version=PROTOCOL,
            )
        )  # fmt: skip
        assert self.conn.member == (1, 0)

    def close(self) -> None:
        self.far.close()
        self.coordinator.port.drop(self.conn)


def checked(coordinator: Coordinator, peer: Peer, data: bytes) -> None:
    """Feed `data`; whatever it is, no exception and no stop."""
    assert coordinator.stopped is None
    try:
        peer.send(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the coordinator refused and closed: that is an answer
    finally:
        peer.close()
    assert coordinator.stopped is None
    assert coordinator.errors == 0


@FUZZ
@given(data=st.binary(max_size=4096), hello_first=st.booleans())
def test_arbitrary_bytes(coordinator: Coordinator, data: bytes, hello_first: bool) -> None:
    peer = Peer(coordinator)
    if hello_first:
        peer.hello()
    checked(coordinator, peer, data + b"\n")


@FUZZ
@given(value=json_values, hello_first=st.booleans())
def test_arbitrary_json(coordinator: Coordinator, value: Any, hello_first: bool) -> None:
    peer = Peer(coordinator)
    if hello_first:
        peer.hello()
    checked(coordinator, peer, json.dumps(value).encode() + b"\n")


@FUZZ
@given(line=nasty, hello_first=st.booleans())
def test_lines_that_break_parsers(coordinator: Coordinator, line: bytes, hello_first: bool) -> None:
    peer = Peer(coordinator)
    if hello_first:
        peer.hello()
    checked(coordinator, peer, line + b"\n")


@FUZZ
@given(
    kind=kinds,
    extra=fields,
    who=st.sampled_from([(b"", JOB), (b"guessed", JOB), (SECRET, "job-other"), (SECRET, "-")]),
    hello_first=st.booleans(),
)
def test_unsigned_or_foreign_lines_of_any_shape(
    coordinator: Coordinator,
    kind: str,
    extra: dict[str, Any],
    who: tuple[bytes, str],
    hello_first: bool,
) -> None:
    peer = Peer(coordinator)
    if hello_first:
        peer.hello()
    secret, job = who
    checked(coordinator, peer, peer.signed(secret, job, kind, **extra))


@FUZZ
@given(kind=kinds, extra=fields)
def test_signed_lines_with_any_field_types_never_raise(kind: str, extra: dict[str, Any]) -> None:
    """Signed with the job's secret (or by anybody when the job has none): the coordinator may
    act on it (a failure stops the job), but never raises. A coordinator of its own each time."""
    coord = Coordination(host="127.0.0.1", port=0, nodes=3, index=0, job=JOB)
    coordinator = Coordinator(coord, SECRET, announce=quiet)
    try:
        peer = Peer(coordinator)
        peer.hello()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused: closed
            peer.send(peer.signed(SECRET, JOB, kind, **extra))
            peer.send(peer.signed(SECRET, JOB, "hb", idle=0.5))
        assert coordinator.errors == 0
        coordinator._tick()
        coordinator.report()
    finally:
        coordinator.port.server.close()
        coordinator.port.sel.close()


@FUZZ
@given(data=st.binary(max_size=2048))
def test_decode_only_ever_refuses(data: bytes) -> None:
    try:
        body = decode(SECRET, JOB, data)
    except ProtocolError:
        return
    assert isinstance(body, dict)


def _reference_lines(stream: bytes, limit: int) -> list[bytes] | None:
    """What a line buffer owes a stream taken whole: its non-blank lines, or None (refused) once
    a line, or what is left unfinished, is longer than `limit`."""
    *lines, rest = stream.split(b"\n")
    if len(rest) > limit or any(len(line) > limit for line in lines):
        return None
    return [line for line in lines if line.strip()]


@FUZZ
@given(
    pieces=st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.sampled_from([b"\n", b"x\n", b" \n", b"ab\ncd"]),
            st.integers(0, 30).map(lambda n: b"y" * n + b"\n"),  # one whole line a read
        ),
        max_size=30,
    ),
    limit=st.integers(1, 24),
)
def test_a_line_buffer_gives_the_same_lines_however_the_bytes_are_cut(
    pieces: list[bytes], limit: int
) -> None:
    """One read is one line most of the time (LineBuffer.feed's fast path); any cut of the same
    bytes into reads gives the same lines, and the same refusal of a line over the limit."""
    from marun.job.protocol import LineBuffer

    buf, got = LineBuffer(limit), []
    for piece in pieces:
        try:
            got += buf.feed(piece)
        except ProtocolError:  # (a line over the limit so far is one in the whole stream)
            got = None  # type: ignore[assignment]
            break
    assert got == _reference_lines(b"".join(pieces), limit)
