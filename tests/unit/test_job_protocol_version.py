"""The wire's version (marun.job.protocol.PROTOCOL): node 0 turns away a hello of another
version with one line naming both, and a member refuses node 0's challenge of another version;
a marun from before the version existed (none sent: version 1) is another version."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from marun.job.coordinator import Coordinator
from marun.job.handshake import read_challenge
from marun.job.protocol import PROTOCOL, ProtocolError, decode, encode, new_nonce
from marun.plan.coordination import Coordination

SECRET = b"version-secret"
JOB = "job-v"


def _coordinator() -> Coordinator:
    coord = Coordination(host="127.0.0.1", port=0, nodes=2, index=0, job=JOB)
    return Coordinator(coord, SECRET, announce=lambda _: None, log=lambda *a, **k: None)


@pytest.mark.parametrize("version", [None, 1, PROTOCOL + 1])
def test_node_0_turns_away_a_hello_of_another_version(version: int | None) -> None:
    coordinator = _coordinator()
    ours, theirs = socket.socketpair()
    try:
        coordinator.port.take(ours, "127.0.0.1")
        conn = next(c for c in coordinator.port.conns if c.sock is ours)
        challenge = decode(SECRET, JOB, theirs.recv(1 << 16).splitlines()[0])
        assert challenge["version"] == PROTOCOL
        hello: dict[str, Any] = {"job": JOB, "node": 1, "slot": 0, "type": "hello", "seq": 0}
        hello.update(peer=conn.nonce, nonce=new_nonce(), host="h1", instance=new_nonce())
        if version is not None:
            hello["version"] = version
        theirs.sendall(encode(SECRET, hello))
        coordinator.port.read(conn)
        assert (1, 0) not in coordinator.members
        refused = decode(SECRET, JOB, theirs.recv(1 << 16).splitlines()[0])
        assert refused["type"] == "refused"
        said = f"protocol {version or 1}, node 0's {PROTOCOL}"
        assert said in refused["why"], refused
    finally:
        theirs.close()
        coordinator.port.server.close()
        coordinator.port.sel.close()


def test_a_member_refuses_a_challenge_of_another_version() -> None:
    ours, theirs = socket.socketpair()
    try:
        body = {"job": JOB, "node": 0, "slot": 0, "type": "challenge", "seq": 0}
        body.update(nonce=new_nonce(), instance=new_nonce())  # no version: a marun before it
        theirs.sendall(encode(SECRET, body))
        coord = Coordination(host="127.0.0.1", port=1, nodes=2, index=1, job=JOB)
        with pytest.raises(ProtocolError, match=f"speaks protocol 1, this one {PROTOCOL}"):
            read_challenge(ours, SECRET, coord, "h1")
    finally:
        ours.close()
        theirs.close()
