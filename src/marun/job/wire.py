"""Node 0's job port, the shell's wire (`JobPort`): who may connect, the connections, reading,
refusing and sending; what the lines mean is the job machine's (marun.job.machine). What one
event costs does not grow with the job (docs/performance.md): connections are counted per
source, the ones without a hello wait in a queue, lines out go through a buffer per connection
that the selector drains (marun.job.wire_out), node 0's heartbeats come from a schedule (a heap
by when each is due), not a pass over every member."""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from marun.job.actions import NodeBeats
from marun.job.beat_schedule import TICK, BeatSchedule
from marun.job.conns import AllowedHosts, Conn, Lane, checked_line, has_bytes
from marun.job.limits import (
    ACCEPTS_PER_WAKE,
    HELLO_WAIT,
    SLOW_READER,
    RefusalLog,
    Reserve,
    listen_backlog,
    per_source_limit,
    total_limit,
)
from marun.job.messages import (
    Challenge,
    DropLane,
    Hello,
    LeaderBeat,
    LeaderMessage,
    Refused,
    Welcome,
)
from marun.job.protocol import (
    MAX_LINE,
    PROTOCOL,
    ProtocolError,
)
from marun.job.relay_side import SlotBeat
from marun.job.signing import Template
from marun.job.wire_out import SendSide
from marun.plan.coordination import Coordination


class JobPort(SendSide):
    """The connections of node 0's job port, used by the coordinator's thread only: `on_line`
    gets each line's decoded body and its lane, `on_closed` each lane that closed. In a job of
    several slots every connection is a node's relay's (marun.job.relay, `relayed`): a line names
    its slot, node 0's lines for one slot name it (`to`), a broadcast goes once per connection."""

    def __init__(
        self,
        coord: Coordination,
        secret: bytes,
        instance: str,
        hb_every: float,
        *,
        log: Callable[..., None],
        on_line: Callable[[Lane, dict[str, Any]], None],
        on_closed: Callable[[Lane], None],
        on_beats: Callable[[Conn, int, list[SlotBeat]], None],
        on_hellos: Callable[[list[tuple[Lane, Hello]]], None],
        on_group_beats: Callable[[Conn, list[NodeBeats]], None],
    ) -> None:
        self.coord = coord
        self._secret = secret
        self.instance = instance
        self.hb_every = hb_every  # both sides' heartbeat interval (marun.job.heartbeat)
        self._on_line = on_line
        self._on_closed = on_closed
        self._on_beats = on_beats  # a relay's `beats` line (its slots' heartbeats) at once
        self._on_hellos = on_hellos  # a relay's `hellos` line (its slots' hellos) at once
        self._on_group_beats = on_group_beats  # a hub's `groupbeats` line (its group's beats)
        self.relayed = coord.slots > 1  # every connection is a node's relay (marun.job.relay)
        self._corked: Conn | None = None  # the connection being read (its replies wait)
        self.sel = selectors.DefaultSelector()
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("", coord.port))
        self.server.listen(listen_backlog(coord.nodes * coord.slots))
        self.server.setblocking(False)
        self.sel.register(self.server, selectors.EVENT_READ, None)
        self.reserve = Reserve()
        self.refusals = RefusalLog(log)
        self.conns: set[Conn] = set()
        self.per_source: dict[str, int] = {}
        self._without_hello: deque[Conn] = deque()
        self.stuck: set[Conn] = set()
        self._hb_line = self.template(LeaderBeat())
        # every connection's challenge, its nonce the line's own (marun.job.signing)
        self._challenge_line = self.template(Challenge(instance, PROTOCOL))
        self.beats = BeatSchedule(hb_every, self._live, self._heartbeat)
        self._welcome: tuple[Welcome, Template] | None = None  # the last welcome's template
        self._address_allowed = AllowedHosts(coord.hosts)

    @property
    def expected(self) -> int:
        return self.coord.nodes * self.coord.slots

    def close(self) -> None:
        for conn in list(self.conns):
            self.drop(conn)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(self.server)
        self.server.close()
        self.sel.close()
        self.reserve.close()

    def accept(self) -> None:
        """Every connection waiting (up to ACCEPTS_PER_WAKE), not one per wake-up."""
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, peer = self.server.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self._out_of_descriptors()
                return
            self.take(sock, str(peer[0]))

    def take(self, sock: socket.socket, address: str) -> None:
        conn = Conn(sock, address)
        if not self._address_allowed(conn.address):
            self.refuse(conn, "not from one of the job's hosts")
            sock.close()
            return
        mine = self.per_source.get(conn.address, 0)
        if len(self.conns) >= total_limit(self.expected):
            self.refuse(conn, f"too many connections ({len(self.conns)} open)")
            sock.close()
            return
        if mine >= per_source_limit(self.expected):
            self.refuse(conn, f"too many connections from this address ({mine} open)")
            sock.close()
            return
        sock.setblocking(False)
        self.conns.add(conn)
        self.per_source[conn.address] = mine + 1
        self._without_hello.append(conn)
        self.sel.register(sock, selectors.EVENT_READ, conn)
        self.send_signed(conn, self._challenge_line, nonce=conn.nonce)

    def _out_of_descriptors(self) -> None:
        """The process has no descriptor left: take the waiting connection with the reserve one
        and close it at once (else the listening socket stays readable and the loop spins)."""
        with self.reserve.released():
            try:
                sock, peer = self.server.accept()
            except OSError:
                time.sleep(TICK)  # still none: let the rest of the process free some
                return
            sock.close()
        self.refusals.refuse(str(peer[0]), "no file descriptor left (too many open files)")

    def ready(self, conn: Conn, mask: int) -> None:
        """The selector's word on a connection: output first (it frees the buffer), then input."""
        if mask & selectors.EVENT_WRITE and conn in self.conns:
            self.flush(conn)
        if mask & selectors.EVENT_READ and conn in self.conns and not conn.closing:
            self.read(conn)

    def read(self, conn: Conn) -> None:
        """Its lines; node 0's replies go out in one send (a relay's 8 hellos: one send)."""
        self._corked = conn
        try:
            self._read(conn)
        finally:
            if conn.welcomes and conn in self.conns and not conn.closing:
                self._held_welcomes(conn)  # (into the corked lines: one send)
            self._corked = None
            self._uncork(conn)

    def _read(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.drop(conn)
            return
        try:
            lines = conn.buf.feed(data)
        except ProtocolError as exc:
            self.refuse(conn, str(exc))
            self.drop(conn)
            return
        for line in lines:
            if conn not in self.conns or conn.closing:
                return  # dropped, or turned away, by the line before
            try:
                body, entries = checked_line(self._secret, self.coord, conn, line)
            except (ProtocolError, ValueError) as exc:
                self.refuse(conn, str(exc))
                self.drop(conn)
                return
            kind = body["type"]
            if kind == "gone":
                self._gone(conn, body["slot"])
            elif kind == "hellos":
                self._on_hellos([(self.lane(conn, hello.slot), hello) for hello in entries])
            elif kind == "beats":
                if conn.via_hub is not None:  # its hub is gone for it: node 0's go direct
                    self.beats.direct(conn, time.monotonic())
                self._on_beats(conn, body["node"], entries)
            elif kind == "groupbeats":
                self._on_group_beats(conn, entries)
            else:
                self._on_line(self.lane(conn, body["slot"]), body)

    def lane(self, conn: Conn, slot: int) -> Lane:
        """The lane of `slot` on `conn`, new or kept (kept for a slot of the job only)."""
        lane = conn.lanes.get(slot)
        if lane is None:
            lane = Lane(conn, slot)
            if 0 <= slot < self.coord.slots:
                conn.lanes[slot] = lane
        return lane

    def _gone(self, conn: Conn, slot: int) -> None:
        lane = conn.lanes.pop(slot, None)
        if lane is not None:
            self._on_closed(lane)

    def drop(self, conn: Conn) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        conn.sock.close()
        if conn not in self.conns:
            return  # dropped before (the books below are kept once)
        self.conns.discard(conn)
        self.stuck.discard(conn)
        left = self.per_source.get(conn.address, 0) - 1
        if left > 0:
            self.per_source[conn.address] = left
        else:
            self.per_source.pop(conn.address, None)
        lanes, conn.lanes = list(conn.lanes.values()), {}
        for lane in lanes:
            self._on_closed(lane)
        self.beats.gone(conn, time.monotonic())  # (a hub: its group's go direct)

    def _live(self, conn: Conn) -> bool:
        return conn in self.conns and not conn.closing

    def _heartbeat(self, conn: Conn) -> None:
        self.send_signed(conn, self._hb_line)

    def bind(self, lane: Lane, key: tuple[int, int]) -> None:
        """Its hello was taken: it speaks for `key`, and longer lines (stacks) may follow."""
        lane.member = key
        conn = lane.conn
        if conn.node is None:
            conn.node = key[0]
        conn.member = conn.member or key
        conn.buf.limit = MAX_LINE

    def drop_lane(self, lane: Lane) -> None:
        """Let go of one marun: its connection (it reconnects), or behind a relay its lane."""
        conn = lane.conn
        if not self.relayed:
            self.drop(conn)
            return
        if conn.lanes.get(lane.slot) is lane:
            del conn.lanes[lane.slot]
            self.send_conn(conn, DropLane(), to=lane.slot)
            self._on_closed(lane)

    def turn_away_lane(self, lane: Lane, why: str) -> None:
        """`turn_away` for one marun: behind a relay, `refused` to its slot and its lane let go."""
        if not self.relayed:
            self.turn_away(lane.conn, why)
            return
        self.refuse(lane.conn, why)
        conn = lane.conn
        if conn.peer_nonce is not None:
            self.send_conn(conn, Refused(why), to=lane.slot)
        if conn.lanes.get(lane.slot) is lane:
            self.drop_lane(lane)
        else:
            self.send_conn(conn, DropLane(), to=lane.slot)  # (a slot the job does not have)

    def send_lane(self, lane: Lane, message: LeaderMessage) -> None:
        """A line for one marun: on its connection, naming its slot behind a relay."""
        conn = lane.conn
        if not self.relayed:
            self.send_conn(conn, message)
        elif conn.lanes.get(lane.slot) is lane:
            self.send_conn(conn, message, to=lane.slot)

    def refuse(self, conn: Conn, why: str) -> None:
        self.refusals.refuse(conn.address, why)

    def turn_away(self, conn: Conn, why: str) -> None:
        """A hello refused with a reason the member logs (another job's marun, a second marun
        for a node): one line on each side, and the connection closed once that line is out."""
        self.refuse(conn, why)
        if conn.peer_nonce is not None:
            self.send_conn(conn, Refused(why))
        self._uncork(conn)
        if conn.out and conn in self.conns:
            conn.closing = True  # read no more; _flush closes it (or SLOW_READER does)
            self._interest(conn, selectors.EVENT_WRITE)
        else:
            self.drop(conn)

    # (sending: marun.job.wire_out's SendSide)

    # -- time -------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """The port's part of the coordinator's tick: connections that never said hello, members
        that stopped reading, node 0's heartbeats that are due. Each looks at what is due only."""
        self.refusals.flush(now)
        waiting = self._without_hello
        while waiting:
            conn = waiting[0]
            if conn.member is not None or conn not in self.conns:
                waiting.popleft()
            elif now - conn.opened > HELLO_WAIT:
                waiting.popleft()
                if has_bytes(conn.sock):  # its hello waits for node 0 (behind at arrival)
                    conn.opened = now
                    waiting.append(conn)
                    continue
                self.refuse(conn, f"no hello within {HELLO_WAIT:g}s")
                self.drop(conn)
            else:
                break  # the rest came later
        for conn in list(self.stuck):
            if conn.stuck_since is not None and now - conn.stuck_since > SLOW_READER:
                self.refuse(conn, f"not reading: nothing taken for {SLOW_READER:g}s")
                self.drop(conn)
        self.beats.due(now)

    def unheard(self, now: float) -> float:
        """The longest any member's marun has gone without a line of node 0's: asked after node
        0's own stall alone (marun.job.beat_schedule)."""
        return self.beats.unheard(self.conns, now)
