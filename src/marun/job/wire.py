"""The coordinator's side of the wire (node 0's job port): who may connect, the connections,
reading and refusing, and sending; what it knows of each member (`MemberState`). The job's
logic (arrival, stop, done, the hang watchdog) is `Coordinator`'s, in marun.job.coordinator,
which these methods hand each message to (`_handle`)."""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import random
import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from marun.job.heartbeat import job_interval
from marun.job.limits import (
    ACCEPTS_PER_WAKE,
    HELLO_WAIT,
    OUTPUT_LIMIT,
    SLOW_READER,
    RefusalLog,
    Reserve,
    per_source_limit,
    total_limit,
)
from marun.job.protocol import (
    MAX_HELLO_LINE,
    PROTOCOL,
    LineBuffer,
    ProtocolError,
    decode,
    fresh,
    is_nonce,
    new_nonce,
)
from marun.job.roster import Roster
from marun.job.signing import Template
from marun.plan.coordination import Coordination

TICK = 0.2  # the coordinator's loop (and its tick) runs at least this often
TICK_WALKS = 8192  # members the tick may walk a second (it walks all: lost nodes, the end)
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
    # Lines not yet taken by the socket: sent by the selector when it is writable (node 0's
    # one loop never waits on one member), bounded (limits.OUTPUT_LIMIT, SLOW_READER).
    out: bytearray = field(default_factory=bytearray)
    stuck_since: float | None = None  # monotonic: output waiting, and no byte taken since
    last_out: float = 0.0  # monotonic: the last line queued (node 0's heartbeat is due after)
    beating: bool = False  # in the heartbeat schedule
    closing: bool = False  # closed once its output is out (a refusal's reason)


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
    closed_at: float = 0.0  # monotonic: when its connection last closed (conn None since)
    # restart rounds (marun.job.restart_rounds): the last round it said `stopped` and `running`
    # for, and how many ranks it started then
    stopped_round: int = 0
    running_round: int = 0
    ranks: int = 0


class CoordinatorWire:
    """The connections of node 0's job port; `Coordinator` is the rest.

    What any one event costs does not grow with the job (docs/performance.md, "The job's
    coordination at scale"): connections are counted per source as they open and close, the
    ones without a hello wait in a queue in the order they came, lines out go through a buffer
    per connection that the selector drains, and node 0's heartbeats come from a schedule
    (a heap by when each is due), not a pass over every member."""

    coord: Coordination
    instance: str
    members: Roster
    _secret: bytes
    _lock: threading.Lock
    _sel: selectors.BaseSelector
    _server: socket.socket
    _conns: set[Conn]
    _reserve: Reserve
    _refusals: RefusalLog
    _allowed: set[str] | None
    _allowed_at: float
    _per_source: dict[str, int]
    _without_hello: deque[Conn]
    _stuck: set[Conn]
    _beats: list[tuple[float, int, Conn]]
    _beat_order: itertools.count[int]
    hb_every: float
    _hb_line: Template
    _tick_every: float
    _last_tick: float

    def _handle(self, conn: Conn, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _wire_init(self) -> None:
        """The books of the port (the coordinator's __init__ calls this once)."""
        self._conns = set()
        self.members = Roster(self.coord.slots)
        self._per_source = {}
        self._without_hello = deque()
        self._stuck = set()
        self._beats = []
        self._beat_order = itertools.count()
        # Both sides' heartbeat interval, from what both know (marun.job.heartbeat).
        self.hb_every = job_interval(self.coord)
        self._hb_line = self._template("hb", {})
        # The tick walks every member (lost nodes, the end): after every batch of lines in a
        # small job (as before), in a larger one as often as TICK_WALKS member visits a second
        # allow: every 0.125 s at 1,024 marun processes, every second at 8,192.
        self._tick_every = min(1.0, self.expected / TICK_WALKS)
        self._last_tick = 0.0

    @property
    def expected(self) -> int:
        return self.coord.nodes * self.coord.slots

    def _tick_due(self) -> bool:
        """The tick (timeouts, heartbeats, done) runs at most every `_tick_every`: at 8,192
        members a batch of lines comes every few milliseconds, and the tick walks them all."""
        now = time.monotonic()
        if now - self._last_tick < self._tick_every:
            return False
        self._last_tick = now
        return True

    def _accept(self) -> None:
        """Every connection waiting (up to ACCEPTS_PER_WAKE), not one per wake-up: 8,192 nodes
        connect within seconds."""
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, peer = self._server.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self._out_of_descriptors()
                return
            self._take(sock, str(peer[0]))

    def _take(self, sock: socket.socket, address: str) -> None:
        conn = Conn(sock, address)
        if not self._address_allowed(conn.address):
            self._refuse(conn, "not from one of the job's hosts")
            sock.close()
            return
        mine = self._per_source.get(conn.address, 0)
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
        self._per_source[conn.address] = mine + 1
        self._without_hello.append(conn)
        self._sel.register(sock, selectors.EVENT_READ, conn)
        self._send_conn(
            conn, "challenge", nonce=conn.nonce, instance=self.instance, version=PROTOCOL
        )

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

    def _ready(self, conn: Conn, mask: int) -> None:
        """The selector's word on a connection: output first (it frees the buffer), then input."""
        if mask & selectors.EVENT_WRITE and conn in self._conns:
            self._flush(conn)
        if mask & selectors.EVENT_READ and conn in self._conns and not conn.closing:
            self._read(conn)

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
            if conn not in self._conns or conn.closing:
                return  # dropped, or turned away, by the line before
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
        if conn not in self._conns:
            return  # dropped before (the books below are kept once)
        self._conns.discard(conn)
        self._stuck.discard(conn)
        left = self._per_source.get(conn.address, 0) - 1
        if left > 0:
            self._per_source[conn.address] = left
        else:
            self._per_source.pop(conn.address, None)
        if conn.member is not None:
            member = self.members.get(conn.member)
            if member is not None and member.conn is conn:
                member.conn = None  # silent from now on: peer_timeout counts
                member.closed_at = time.monotonic()  # and, after the start, CLOSED_LOST
                self.members.closed.add(conn.member)  # before the start: not present (arrival)

    def _refuse(self, conn: Conn, why: str) -> None:
        self._refusals.refuse(conn.address, why)

    def _turn_away(self, conn: Conn, why: str) -> None:
        """A hello refused with a reason the member logs (another job's marun, a second marun
        for a node): one line on each side, and the connection closed once that line is out."""
        self._refuse(conn, why)
        if conn.peer_nonce is not None:
            self._send_conn(conn, "refused", why=why)
        if conn.out and conn in self._conns:
            conn.closing = True  # read no more; _flush closes it (or SLOW_READER does)
            self._interest(conn, selectors.EVENT_WRITE)
        else:
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

    # -- sending ----------------------------------------------------------------------------

    def _send(self, member: MemberState, kind: str, **fields: Any) -> None:
        if member.conn is not None:
            self._send_conn(member.conn, kind, **fields)

    def _send_conn(self, conn: Conn, kind: str, **fields: Any) -> None:
        self._send_signed(conn, self._template(kind, fields))

    def _template(self, kind: str, fields: dict[str, Any]) -> Template:
        body = {"job": self.coord.job, "node": self.coord.leader, "slot": 0, "type": kind}
        body.update(fields)
        return Template(self._secret, body)

    def _send_signed(self, conn: Conn, template: Template) -> None:
        """Sign a line for this connection (its nonce, its next sequence number) and hand it to
        the socket; what the socket does not take now waits in `conn.out` for the selector.
        Never waits: a member that reads nothing is dropped (OUTPUT_LIMIT, SLOW_READER), as a
        slow reader was when sends blocked for up to 2 s."""
        if conn not in self._conns or conn.closing:
            return
        line = template.line(conn.peer_nonce, conn.seq_out)
        conn.seq_out += 1
        now = time.monotonic()
        conn.last_out = now
        if conn.out:
            conn.out += line
            if len(conn.out) > OUTPUT_LIMIT:
                self._refuse(conn, f"not reading: over {OUTPUT_LIMIT >> 20} MiB waiting for it")
                self._drop(conn)
            return
        try:
            sent = conn.sock.send(line)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._drop(conn)
            return
        if sent < len(line):
            conn.out += line[sent:]
            conn.stuck_since = now
            self._stuck.add(conn)
            self._interest(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)
        if not conn.beating and conn.member is not None:
            self._schedule_beat(conn, now + random.uniform(0.0, self.hb_every))

    def _flush(self, conn: Conn) -> None:
        """The socket is writable: as much of the waiting output as it takes."""
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if sent:
            del conn.out[:sent]
            conn.stuck_since = time.monotonic()
        if conn.out:
            return
        conn.stuck_since = None
        self._stuck.discard(conn)
        if conn.closing:
            self._drop(conn)
        else:
            self._interest(conn, selectors.EVENT_READ)

    def _interest(self, conn: Conn, events: int) -> None:
        try:
            self._sel.modify(conn.sock, events, conn)
        except KeyError:  # not registered (a test's connection): now it is
            self._sel.register(conn.sock, events, conn)

    def _broadcast(self, kind: str, **fields: Any) -> None:
        """One line to every member, each signed for its connection; the part common to all is
        encoded once (marun.job.signing)."""
        template = self._template(kind, fields)
        for member in list(self.members.values()):
            if member.conn is not None:
                self._send_signed(member.conn, template)

    # -- time -------------------------------------------------------------------------------

    def _wire_tick(self, now: float) -> None:
        """The port's part of the coordinator's tick: connections that never said hello, members
        that stopped reading, node 0's heartbeats that are due. Each looks at what is due only."""
        self._refusals.flush(now)
        waiting = self._without_hello
        while waiting:
            conn = waiting[0]
            if conn.member is not None or conn not in self._conns:
                waiting.popleft()
            elif now - conn.opened > HELLO_WAIT:
                waiting.popleft()
                self._refuse(conn, f"no hello within {HELLO_WAIT:g}s")
                self._drop(conn)
            else:
                break  # the rest came later
        for conn in list(self._stuck):
            if conn.stuck_since is not None and now - conn.stuck_since > SLOW_READER:
                self._refuse(conn, f"not reading: nothing taken for {SLOW_READER:g}s")
                self._drop(conn)
        self._heartbeats(now)

    def _schedule_beat(self, conn: Conn, due: float) -> None:
        conn.beating = True
        heapq.heappush(self._beats, (due, next(self._beat_order), conn))

    def _heartbeats(self, now: float) -> None:
        """A heartbeat to each member that node 0 has sent nothing for `hb_every` (any line
        shows node 0 alive); spread over the interval, not all in one burst."""
        beats = self._beats
        while beats and beats[0][0] <= now:
            _, _, conn = heapq.heappop(beats)
            if conn not in self._conns or conn.closing:
                conn.beating = False
                continue
            if now - conn.last_out >= self.hb_every - TICK:
                self._send_signed(conn, self._hb_line)
                if conn not in self._conns:
                    conn.beating = False
                    continue
                conn.last_out = max(conn.last_out, now)  # due again an interval after `now`
            self._schedule_beat(conn, conn.last_out + self.hb_every)


def _resolve_all(hosts: tuple[str, ...]) -> set[str]:
    found: set[str] = set()
    for host in hosts:
        try:
            for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM):
                found.add(str(info[4][0]))
        except OSError:
            continue
    return found
