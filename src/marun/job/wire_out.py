"""Node 0's lines out (marun.job.wire's `JobPort`): each signed for its connection (its nonce,
its next sequence number), handed to the socket, and what the socket does not take now kept in
a buffer per connection that the selector drains (node 0's one loop never waits on a member).
The replies to what a connection said wait until its lines are read and go in one send; a
relay's slots' welcomes of one `hellos` line go in one line (protocol 7), before anything else
of node 0's to it."""

from __future__ import annotations

import random
import selectors
import time

from marun.job.beat_schedule import BeatSchedule
from marun.job.conns import Conn
from marun.job.limits import OUTPUT_LIMIT
from marun.job.messages import Challenge, LeaderMessage, Welcome
from marun.job.signing import Template
from marun.plan.coordination import Coordination


class SendSide:
    """The port's sending part (JobPort's, which holds these)."""

    coord: Coordination
    _secret: bytes
    sel: selectors.BaseSelector
    conns: set[Conn]
    stuck: set[Conn]
    beats: BeatSchedule
    hb_every: float
    _corked: Conn | None
    _welcome: tuple[Welcome, Template] | None

    def refuse(self, conn: Conn, why: str) -> None:
        raise NotImplementedError

    def drop(self, conn: Conn) -> None:
        raise NotImplementedError

    def send_conn(
        self,
        conn: Conn,
        message: LeaderMessage,
        *,
        to: int | None = None,
    ) -> None:
        """(`to`: the slot behind a relay)"""
        if isinstance(message, Welcome):
            # a relay's hellos are welcomed together, with one message (one clock)
            held = self._welcome
            if held is None or (held[0] is not message and held[0] != message):
                held = self._welcome = (message, self.template(message))
            template = held[1]
            if to is not None and conn is self._corked:
                # and in one line to all of them (protocol 7: `to` a list of slots), sent before
                # any other line of node 0's to the node: 1 line signed a node, not 8
                if conn.welcome_template is not template:
                    self._held_welcomes(conn)
                conn.welcome_template = template
                conn.welcomes.append(to)
                return
        else:
            template = self.template(message)
        self.send_signed(conn, template, to)

    def template(self, message: LeaderMessage | Challenge) -> Template:
        """A message as a line to sign for each connection (encoded once for many)."""
        body = {"job": self.coord.job, "node": self.coord.leader, "slot": 0}
        body.update(message.to_wire(), type=message.KIND)
        return Template(self._secret, body)

    def send_signed(
        self, conn: Conn, template: Template, to: int | None = None, nonce: str | None = None
    ) -> None:
        """Sign a line for this connection (its nonce, its next sequence number) and hand it to
        the socket; what the socket does not take now waits in `conn.out` for the selector.
        Never waits: a member that reads nothing is dropped (OUTPUT_LIMIT, SLOW_READER), as a
        slow reader was when sends blocked for up to 2 s."""
        if conn not in self.conns or conn.closing:
            return
        if conn.welcomes:
            self._held_welcomes(conn)
        self._sign(conn, template, to, nonce)

    def _held_welcomes(self, conn: Conn) -> None:
        """The welcomes held for a relay's slots (send_conn), in one line to them all."""
        slots, conn.welcomes = conn.welcomes, []
        template, conn.welcome_template = conn.welcome_template, None
        if slots and template is not None:
            self._sign(conn, template, slots if len(slots) > 1 else slots[0])

    def _sign(
        self,
        conn: Conn,
        template: Template,
        to: int | list[int] | None,
        nonce: str | None = None,
    ) -> None:
        line = template.line(conn.peer_nonce, conn.seq_out, to, nonce)
        conn.seq_out += 1
        now = time.monotonic()
        conn.last_out = now
        if conn is self._corked:  # replies to what it sent, in one send once it is read
            conn.corked += line
        else:
            self._send_bytes(conn, line, now)
        if not conn.beating and conn.member is not None and conn in self.conns:
            self.beats.schedule(conn, now + random.uniform(0.0, self.hb_every))

    def _uncork(self, conn: Conn) -> None:
        if conn.corked and conn in self.conns:
            data, conn.corked = bytes(conn.corked), bytearray()
            self._send_bytes(conn, data, time.monotonic())

    def _send_bytes(self, conn: Conn, line: bytes, now: float) -> None:
        if conn.out:
            conn.out += line
            if len(conn.out) > OUTPUT_LIMIT:
                self.refuse(conn, f"not reading: over {OUTPUT_LIMIT >> 20} MiB waiting for it")
                self.drop(conn)
            return
        try:
            sent = conn.sock.send(line)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.drop(conn)
            return
        if sent < len(line):
            conn.out += line[sent:]
            conn.stuck_since = now
            self.stuck.add(conn)
            self._interest(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)

    def flush(self, conn: Conn) -> None:
        """The socket is writable: as much of the waiting output as it takes."""
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.drop(conn)
            return
        if sent:
            del conn.out[:sent]
            conn.stuck_since = time.monotonic()
        if conn.out:
            return
        conn.stuck_since = None
        self.stuck.discard(conn)
        if conn.closing:
            self.drop(conn)
        else:
            self._interest(conn, selectors.EVENT_READ)

    def _interest(self, conn: Conn, events: int) -> None:
        try:
            self.sel.modify(conn.sock, events, conn)
        except KeyError:  # not registered (a test's connection): now it is
            self.sel.register(conn.sock, events, conn)
