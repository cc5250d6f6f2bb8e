"""Node 0's connections (marun.job.wire's `JobPort` keeps them): a `Conn` per socket, and on it
a `Lane` per marun it carries: the handle the job machine knows a member by. A node's relay
(marun.job.relay) brings its node's slots on one connection, a lane each. And what node 0
checks of every line on one (`checked_line`)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Any

from marun.job.protocol import (
    MAX_HELLO_LINE,
    LineBuffer,
    ProtocolError,
    decode,
    fresh,
    is_nonce,
    new_nonce,
)
from marun.job.relay_side import beats_of, group_beats_of, hellos_of
from marun.plan.coordination import Coordination
from marun.plan.hubs import group_of, is_hub


@dataclass(eq=False)
class Conn:
    sock: socket.socket
    address: str
    opened: float = field(default_factory=time.monotonic)
    buf: LineBuffer = field(default_factory=lambda: LineBuffer(MAX_HELLO_LINE))
    member: tuple[int, int] | None = None
    nonce: str = field(default_factory=new_nonce)  # ours: every line in must name it
    peer_nonce: str | None = None  # the member's, from its hello: every line out names it
    seq_in: int = -1
    seq_out: int = 0
    # Lines not yet taken by the socket: sent by the selector when it is writable (node 0's
    # one loop never waits on one member), bounded (limits.OUTPUT_LIMIT, SLOW_READER).
    out: bytearray = field(default_factory=bytearray)
    corked: bytearray = field(default_factory=bytearray)  # replies while its lines are read
    stuck_since: float | None = None  # monotonic: output waiting, and no byte taken since
    last_out: float = 0.0  # monotonic: the last line queued (node 0's heartbeat is due after)
    beating: bool = False  # in the heartbeat schedule
    closing: bool = False  # closed once its output is out (a refusal's reason)
    # One connection per node (marun.job.relay): the node its first taken hello named, and its
    # slots on it by slot (a direct member's connection has its one, slot 0 of a job of one slot)
    node: int | None = None
    lanes: dict[int, Lane] = field(default_factory=dict)
    # Liveness hubs (marun.plan.hubs): the hub whose `groupbeats` spoke for this node lately
    # (node 0's heartbeats reach it through the hub meanwhile), and when; a hub's: those nodes'
    via_hub: Conn | None = None
    via_at: float = 0.0
    children: set[Conn] = field(default_factory=set)
    # A relay's slots' welcomes of one `hellos` line, held while its lines are read and sent as
    # one line to them all (`to`: the slots) before any other line of node 0's to it; the
    # welcome's template (marun.job.signing.Template; Any: signing stays off this module)
    welcomes: list[int] = field(default_factory=list)
    welcome_template: Any = None


@dataclass(eq=False)
class Lane:
    """One marun (a node's slot) on a connection: the handle the job machine knows a member by.
    Behind a relay a node's slots share their node's connection, each on its lane; a direct
    member's connection carries its one lane."""

    conn: Conn
    slot: int
    member: tuple[int, int] | None = None  # bound: its hello was taken

    @property
    def address(self) -> str:
        return self.conn.address


def resolve_all(hosts: tuple[str, ...]) -> set[str]:
    """The addresses the job's hosts resolve to now (those that do)."""
    found: set[str] = set()
    for host in hosts:
        try:
            for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM):
                found.add(str(info[4][0]))
        except OSError:
            continue
    return found


class AllowedHosts:
    """Whether a connection's source address is one of the job's hosts (resolved; loopback is
    this node's own marun processes), asked of each connection as it opens."""

    def __init__(self, hosts: tuple[str, ...]) -> None:
        self._hosts = hosts
        self._allowed: set[str] | None = None
        self._allowed_at = 0.0

    def __call__(self, address: str) -> bool:
        if address.startswith("127.") or address == "::1":
            return True  # this node's own marun processes (and nobody else's: a container)
        if not self._hosts:
            return True  # the job's hosts are unknown; the job id and the secret still hold
        now = time.monotonic()
        if self._allowed is None or (address not in self._allowed and now - self._allowed_at > 5):
            # Names of pods may resolve only some time after they start: look again, not often.
            self._allowed = resolve_all(self._hosts)
            self._allowed_at = now
        return address in self._allowed


def has_bytes(sock: socket.socket) -> bool:
    """Bytes wait in the socket (node 0 has not read them yet)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:
        return False


def checked_line(
    secret: bytes, coord: Coordination, conn: Conn, line: bytes
) -> tuple[dict[str, Any], list[Any]]:
    """A line on `conn`: its body, checked (signed for this job, the connection's next, of the
    connection's own node), and a relay's entries (a `beats` or `hellos` line's; else none);
    ProtocolError or ValueError for anything else. A hello names the member's nonce (a relay's
    every hello the same): node 0's lines on the connection name it."""
    body = decode(secret, coord.job, line)
    conn.seq_in = fresh(body, conn.nonce, conn.seq_in)
    kind = body["type"]
    if kind in ("hello", "hellos"):
        if not is_nonce(body.get("nonce")):
            raise ProtocolError("hello without a nonce")
        if conn.peer_nonce is None:
            conn.peer_nonce = str(body["nonce"])
    if conn.node is not None and body["node"] != conn.node:
        raise ProtocolError(f"a line of node {body['node']} on node {conn.node}'s connection")
    if kind == "beats":
        return body, beats_of(body.get("beats"), coord.slots)
    if kind == "groupbeats":
        if conn.node is None or not is_hub(coord, conn.node):
            raise ProtocolError(f"groupbeats from node {body['node']}, not a hub of this job")
        return body, group_beats_of(body.get("nodes"), group_of(coord, conn.node), coord.slots)
    if kind == "hellos":
        return body, hellos_of(body, coord.slots)
    return body, []
