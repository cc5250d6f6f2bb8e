"""The coordinator's side of the wire (node 0's job port): who may connect, the connections,
reading and refusing, and sending; what it knows of each member (`MemberState`). The job's
logic (arrival, stop, done, the hang watchdog) is `Coordinator`'s, in marun.job.coordinator,
which these methods hand each message to (`_handle`)."""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from marun.job.limits import RefusalLog, Reserve, per_source_limit, total_limit
from marun.job.protocol import (
    MAX_HELLO_LINE,
    LineBuffer,
    ProtocolError,
    decode,
    encode,
    fresh,
    is_nonce,
    new_nonce,
)
from marun.plan.coordination import Coordination

TICK = 0.2  # the coordinator's loop runs at least this often
_CPU_KEPT = 4096  # heartbeats of CPU figures kept per member (over an hour at one a second)


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


@dataclass
class MemberState:
    node: int
    slot: int
    host: str
    address: str
    arrived: float  # wall clock
    last_seen: float  # monotonic
    instance: str = ""  # its marun process's (a new one: that node's marun was restarted)
    last_seen_wall: float = 0.0  # wall clock of last_seen: when a lost node ended, for job.json
    conn: Conn | None = None
    idle: float = 0.0  # seconds without a rank's line, as of its last heartbeat
    # (monotonic, CPU seconds its ranks have used) from its heartbeats: the hang watchdog's
    cpu_history: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=_CPU_KEPT))
    daemons_only: bool = False
    ended: float | None = None
    outcome: str | None = None
    exit_code: int | None = None
    stacks: str | None = None
    # restart rounds (marun.job.restart_rounds): the last round it said `stopped` and `running`
    # for, and how many ranks it started then
    stopped_round: int = 0
    running_round: int = 0
    ranks: int = 0


class CoordinatorWire:
    """The connections of node 0's job port; `Coordinator` is the rest."""

    coord: Coordination
    instance: str
    members: dict[tuple[int, int], MemberState]
    _secret: bytes
    _lock: threading.Lock
    _sel: selectors.BaseSelector
    _server: socket.socket
    _conns: set[Conn]
    _reserve: Reserve
    _refusals: RefusalLog
    _allowed: set[str] | None
    _allowed_at: float

    def _handle(self, conn: Conn, body: dict[str, Any]) -> None:
        raise NotImplementedError

    @property
    def expected(self) -> int:
        return self.coord.nodes * self.coord.slots

    def _accept(self) -> None:
        try:
            sock, peer = self._server.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self._out_of_descriptors()
            return
        conn = Conn(sock, str(peer[0]))
        if not self._address_allowed(conn.address):
            self._refuse(conn, "not from one of the job's hosts")
            sock.close()
            return
        mine = sum(1 for c in self._conns if c.address == conn.address)
        if len(self._conns) >= total_limit(self.expected):
            self._refuse(conn, f"too many connections ({len(self._conns)} open)")
            sock.close()
            return
        if mine >= per_source_limit(self.expected):
            self._refuse(conn, f"too many connections from this address ({mine} open)")
            sock.close()
            return
        sock.setblocking(False)
        self._conns.add(conn)
        self._sel.register(sock, selectors.EVENT_READ, conn)
        self._send_conn(conn, "challenge", nonce=conn.nonce, instance=self.instance)

    def _out_of_descriptors(self) -> None:
        """The process has no descriptor left: take the waiting connection with the reserve one
        and close it at once (else the listening socket stays readable and the loop spins)."""
        with self._reserve.released():
            try:
                sock, peer = self._server.accept()
            except OSError:
                time.sleep(TICK)  # still none: let the rest of the process free some
                return
            sock.close()
        self._refusals.refuse(str(peer[0]), "no file descriptor left (too many open files)")

    def _read(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        try:
            lines = conn.buf.feed(data)
        except ProtocolError as exc:
            self._refuse(conn, str(exc))
            self._drop(conn)
            return
        for line in lines:
            if conn not in self._conns:
                return  # dropped by the line before
            try:
                body = decode(self._secret, self.coord.job, line)
                conn.seq_in = fresh(body, conn.nonce, conn.seq_in)
                if body["type"] == "hello":
                    if not is_nonce(body.get("nonce")):
                        raise ProtocolError("hello without a nonce")
                    conn.peer_nonce = str(body["nonce"])
            except ProtocolError as exc:
                self._refuse(conn, str(exc))
                self._drop(conn)
                return
            with self._lock:
                self._handle(conn, body)

    def _drop(self, conn: Conn) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        conn.sock.close()
        self._conns.discard(conn)
        if conn.member is not None:
            member = self.members.get(conn.member)
            if member is not None and member.conn is conn:
                member.conn = None  # silent from now on: peer_timeout counts

    def _refuse(self, conn: Conn, why: str) -> None:
        self._refusals.refuse(conn.address, why)

    def _turn_away(self, conn: Conn, why: str) -> None:
        """A hello refused with a reason the member logs (another job's marun, a second marun
        for a node): one line on each side, and the connection closed."""
        self._refuse(conn, why)
        if conn.peer_nonce is not None:
            self._send_conn(conn, "refused", why=why)
        self._drop(conn)

    def _address_allowed(self, address: str) -> bool:
        if address.startswith("127.") or address == "::1":
            return True  # this node's own marun processes (and nobody else's: a container)
        if not self.coord.hosts:
            return True  # the job's hosts are unknown; the job id and the secret still hold
        now = time.monotonic()
        if self._allowed is None or (address not in self._allowed and now - self._allowed_at > 5):
            # Names of pods may resolve only some time after they start: look again, not often.
            self._allowed = _resolve_all(self.coord.hosts)
            self._allowed_at = now
        return address in self._allowed

    def _send(self, member: MemberState, kind: str, **fields: Any) -> None:
        if member.conn is not None:
            self._send_conn(member.conn, kind, **fields)

    def _send_conn(self, conn: Conn, kind: str, **fields: Any) -> None:
        body = {"job": self.coord.job, "node": self.coord.leader, "slot": 0, "type": kind}
        body.update(fields, peer=conn.peer_nonce, seq=conn.seq_out)
        conn.seq_out += 1
        line = encode(self._secret, body)
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(2.0)
            conn.sock.sendall(line)
        except OSError:
            self._drop(conn)
        else:
            with contextlib.suppress(OSError):
                conn.sock.setblocking(False)

    def _broadcast(self, kind: str, **fields: Any) -> None:
        for member in list(self.members.values()):
            self._send(member, kind, **fields)


def _resolve_all(hosts: tuple[str, ...]) -> set[str]:
    found: set[str] = set()
    for host in hosts:
        try:
            for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM):
                found.add(str(info[4][0]))
        except OSError:
            continue
    return found
