"""A member's side of a connection's first line: node 0's `challenge` (marun.job.protocol,
"Replay"), read and checked before the member says hello."""

from __future__ import annotations

import contextlib
import socket

from marun.job.protocol import (
    PROTOCOL,
    LineBuffer,
    ProtocolError,
    decode,
    encode,
    is_nonce,
    new_nonce,
)
from marun.plan.coordination import Coordination


def read_challenge(
    sock: socket.socket, secret: bytes, coord: Coordination, host: str
) -> tuple[str, int, LineBuffer]:
    """Node 0's first line on a connection: its nonce, its sequence number and the buffer the
    rest of the connection is read through (within the connection's 2 s time-out).
    ProtocolError for anything else, including node 0 of another job (which is told so)."""
    buf = LineBuffer()
    while True:
        data = sock.recv(1 << 16)
        if not data:
            raise ProtocolError("connection closed")
        lines = buf.feed(data)
        if lines:
            break
    nonce, seq = check_challenge(lines[0], sock, secret, coord, host)
    if len(lines) > 1:
        raise ProtocolError("more than a challenge before our hello")
    return nonce, seq, buf


def check_challenge(
    line: bytes, sock: socket.socket, secret: bytes, coord: Coordination, host: str
) -> tuple[str, int]:
    """A connection's first line, node 0's challenge: its nonce and sequence number
    (ProtocolError for anything else; node 0 of another job is told so on `sock`)."""
    body = decode(secret, None, line)
    if body["job"] != coord.job:
        # Node 0 of another job (same port, same secret): say hello all the same, so that
        # its marun says so too (one line on each side), then leave.
        with contextlib.suppress(OSError):
            sock.sendall(
                encode(
                    secret,
                    {"job": coord.job, "node": coord.index, "slot": coord.slot, "type": "hello",
                     "host": host, "nonce": new_nonce(), "peer": body.get("nonce"), "seq": 0},
                )
            )  # fmt: skip
        raise ProtocolError(
            f"job id {str(body['job'])[:80]!r} is not this job's {coord.job!r} "
            "(another job's marun)"
        )
    seq = body.get("seq")
    version = body.get("version", 1)
    if body["type"] == "challenge" and version != PROTOCOL:
        raise ProtocolError(
            f"node {coord.leader}'s marun speaks protocol {version}, this one {PROTOCOL} (another "
            "job's marun, or another marun version: every node of a job needs the same)"
        )
    if body["type"] != "challenge" or not is_nonce(body.get("nonce")):
        raise ProtocolError(f"{body['type']} instead of a challenge")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ProtocolError("a challenge without a sequence number")
    return str(body["nonce"]), seq
