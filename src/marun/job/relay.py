"""A node's relay: one connection per node to node 0 (docs/supervision.md, "One connection per
node", says what it checks and hands on). Where the platform starts marun once per device, the
node's slot 0 marun runs this thread; every marun of the node connects to it on a local socket
(`relay_address`), and it carries their lines to node 0 on one TCP connection (their hellos of a
turn in one `hellos` line, their heartbeats in one `beats` line an interval) and node 0's back,
each line checked on one side and signed anew for the other: node 0 sees nodes, not processes.
When the node's connection drops, every local one is closed (each marun says hello again,
through the next); when slot 0's marun dies, node 0 finds the node lost and the other slots
their relay gone (marun.job.member: they stop). The slots' side is marun.job.relay_slots; in a
job with liveness hubs, the relay is its group's hub or links to it (marun.job.hub_link).
"""

from __future__ import annotations

import contextlib
import random
import selectors
import threading
import time
from typing import Any, Callable

from marun.job.handshake import check_challenge
from marun.job.heartbeat import Backoff, connect_wait, job_interval
from marun.job.hub_link import HubLink, HubServer
from marun.job.limits import HELLO_WAIT, RefusalLog
from marun.job.protocol import (
    MAX_LINE,
    ProtocolError,
    encode,
    new_nonce,
)
from marun.job.relay_side import (
    BeatBook,
    HelloBatch,
    Side,
    dial,
    forget,
    leader_line,
    listen_local,
    log_bug,
    relay_address,
)
from marun.job.relay_slots import SlotsSide
from marun.job.signing import Template
from marun.plan.coordination import Coordination
from marun.plan.hubs import hub_of, is_hub

TICK = 0.2  # the relay's loop turns at least this often
PENDING_LINES = 64  # a slot's lines held while the node has no connection to node 0


class Relay(SlotsSide):
    def __init__(
        self,
        coord: Coordination,
        secret: bytes,
        host: str,
        *,
        leader_local: bool = False,
        log: Callable[..., None] | None = None,
    ) -> None:
        self.coord = coord
        self._secret = secret
        self._host = host
        self._log = log or (lambda event, level="info", **kw: None)
        # node 0's own node reaches its coordinator over loopback
        self._target = ("127.0.0.1" if leader_local else coord.host, coord.port)
        self.address = relay_address(coord)
        self.instance = new_nonce()
        self.refusals = RefusalLog(self._log)
        self.sel = selectors.DefaultSelector()
        self._listener = listen_local(self.address, 2 * coord.slots + 8)
        self.sel.register(self._listener, selectors.EVENT_READ, None)
        self._locals: set[Side] = set()
        self._by_slot: dict[int, Side] = {}
        self._up: Side | None = None
        self._up_ready = False  # node 0's challenge read: lines may go up
        self._up_deadline = 0.0
        self._welcomed = False  # node 0 welcomed a slot on this node's connection
        self._backoff = Backoff(coord.nodes)
        self._wait = connect_wait(coord.nodes)
        self._every = job_interval(coord)
        self._next_beats = time.monotonic() + random.uniform(0.0, self._every)
        self._beats = BeatBook()
        self._hellos = HelloBatch()  # the slots' hellos of this turn, for one line
        self.tries = 0
        self.errors = 0
        self._said: set[str] = set()
        self._linger = 0.0
        self._close_requested = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="marun-relay", daemon=True)
        # Liveness hubs (marun.job.hub_link): this node's group's hub, or its link to its hub
        self.hub: HubServer | None = None
        self.link: HubLink | None = None
        if is_hub(coord, coord.index):
            self.hub = HubServer(coord, secret, self.sel, self._every, self._hub_up,
                                 self.refusals, self._log)  # fmt: skip
        elif hub_of(coord, coord.index) is not None:
            self.link = HubLink(coord, secret, host, self.sel, self._every, self._node0_alive,
                                self._log)  # fmt: skip

    def start(self) -> Relay:
        self._thread.start()
        return self

    def close(self, linger: float = 1.0) -> None:
        """Once this node's marun is done: what is waiting goes out (up to `linger` s), then the
        socket closes (the node's other slots, still there, find their relay gone)."""
        self._linger = linger
        self._close_requested.set()
        self._thread.join(linger + 2.0)

    # -- the thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._close_requested.is_set():
                try:
                    self._turn()
                except Exception as exc:  # a bug: logged whole, and the relay goes on
                    self.errors += 1
                    log_bug(self._log, "job_relay_error", exc)
                    time.sleep(TICK)
        finally:
            self._shutdown()

    def _turn(self) -> None:
        if self._up is None and time.monotonic() >= self._backoff.next_try:
            self._connect()
        for key, mask in self.sel.select(TICK):
            side = key.data
            if side is None:
                self._accept()
            elif side is self._up and side is not None:
                self._up_event(side, mask)
            elif side in self._locals:
                self._local_event(side, mask)
            elif self.hub is not None and side is self.hub:
                self.hub.accept()
            elif self.hub is not None and side in self.hub.children:
                self.hub.event(side, mask)
            elif self.link is not None and self.link.side is not None and side is self.link.side:
                self.link.event(self.link.side, mask)
        if self._hellos:
            self._up_hellos()
        self._tick(time.monotonic())

    def _shutdown(self) -> None:
        self._up_hellos()
        if self.hub is not None:
            self.hub.close()
        if self.link is not None:
            self.link.close()
        end = time.monotonic() + self._linger
        for side in [self._up, *self._locals]:
            if side is not None:
                side.close_after(end)
        self._locals.clear()
        self._by_slot.clear()
        self._up = None
        with contextlib.suppress(OSError):
            self._listener.close()
        self.sel.close()

    # -- node 0's side ------------------------------------------------------------------------

    def _connect(self) -> None:
        self.tries += 1
        sock = dial(self._target)
        if isinstance(sock, str):
            self._up_failed(sock)
            return
        self._up = Side(sock)
        self._up_ready = False
        self._up_deadline = time.monotonic() + self._wait
        self.sel.register(sock, selectors.EVENT_WRITE, self._up)

    def _up_failed(self, why: str, clash: bool = False) -> None:
        """A try that did not connect (or had no challenge in time): again after the back-off."""
        up, self._up = self._up, None
        if up is not None:
            forget(self.sel, up)
        self._backoff.failed(turned_away=clash)
        if clash and why not in self._said:
            self._said.add(why)
            self._log("job_refused", "error", reason=why)

    def _up_lost(self) -> None:
        """The node's connection to node 0 closed: every slot's marun connects again (and says
        hello again, through the next connection); at once when node 0 had welcomed the node
        (a blip), else after the back-off."""
        up, self._up = self._up, None
        self._hellos.clear()  # (every slot says hello again, through the next connection)
        if up is not None:
            forget(self.sel, up)
        if self.hub is not None:
            self.hub.close_links()  # its group beats node 0 directly until it is back
        if self.link is not None:
            self.link.drop(None)
        for side in list(self._locals):
            self._close_local(side, tell=False)
        if self._welcomed:
            self._backoff.reset()
        else:
            self._backoff.failed(turned_away=True)
        self._welcomed = False

    def _up_event(self, up: Side, mask: int) -> None:
        if not self._up_ready and mask & selectors.EVENT_WRITE and up.peer_nonce is None:
            why = up.connected(self.sel)  # (its challenge next)
            if why is not None:
                self._up_failed(why)
            return
        if mask & selectors.EVENT_WRITE:
            self._flush(up)
        if mask & selectors.EVENT_READ and self._up is up:
            data = up.recv()
            if data is None:
                return
            try:
                if not data:
                    raise ProtocolError("connection closed")
                lines = up.buf.feed(data)
            except ProtocolError as exc:
                if self._up_ready:
                    self._up_lost()
                else:
                    self._up_failed(str(exc))
                return
            for line in lines:
                if self._up is not up:
                    return
                self._from_leader(up, line)

    def _challenge(self, up: Side, line: bytes) -> None:
        try:
            nonce, up.seq_in = check_challenge(line, up.sock, self._secret, self.coord, self._host)
        except ProtocolError as exc:
            clash = "another job" in str(exc) or "protocol" in str(exc)
            self._up_failed(f"no challenge from node {self.coord.leader}'s marun: {exc}", clash)
            return
        up.peer_nonce = nonce
        up.buf.limit = MAX_LINE
        self._up_ready = True
        for side in list(self._locals):
            held, side.pending = side.pending, []
            for body in held:
                self._up_send(side, body)
        self._up_hellos()

    def _from_leader(self, up: Side, line: bytes) -> None:
        if not self._up_ready:
            self._challenge(up, line)
            return
        try:
            body, to = leader_line(self._secret, self.coord.job, up, line)
        except ProtocolError as exc:
            self._log("job_message_refused", "warning", source="leader", reason=str(exc))
            return
        if self.hub is not None:
            self.hub.heard_node0(time.monotonic())
        kind = body["type"]
        if to is not None:  # (a slot it no longer has: nobody)
            targets = [side for side in map(self._by_slot.get, to) if side is not None]
        else:  # every slot node 0 welcomed (a drop always names its slot: none)
            targets = [] if kind == "drop" else [s for s in self._by_slot.values() if s.welcomed]
        if kind == "drop":
            for side in targets:
                self._close_local(side, tell=False)  # node 0 has let go of it already
            return
        if kind == "welcome" and to is not None:
            for side in targets:
                side.welcomed = self._welcomed = True
        template = Template(self._secret, body)
        for side in targets:
            self._send(side, template.line(side.peer_nonce, side.seq_out))
            side.seq_out += 1

    def _up_send(self, side: Side, body: dict[str, Any]) -> None:
        """A slot's line to node 0, signed for the node's connection (held while it has none)."""
        if self._up is None or not self._up_ready:
            if len(side.pending) >= PENDING_LINES:
                self._refuse(side, "too many lines waiting for node 0")
                self._close_local(side, tell=False)
                return
            side.pending.append(body)
            return
        self._up_write(body)

    def _up_write(self, body: dict[str, Any]) -> None:
        up = self._up
        if up is None or not self._up_ready:
            return
        if body["type"] == "hello":  # with the others of this turn, in one `hellos` line
            self._hellos.add(body)
            return
        self._up_hellos()  # (a slot's hello before its next line)
        self._up_signed({k: v for k, v in body.items() if k not in ("peer", "seq")})

    def _up_hellos(self) -> None:
        """The slots' hellos of this turn: node 0 takes them at one time and welcomes them with
        one message (32,768 hellos at 4,096 x 8)."""
        up = self._up
        lines = self._hellos.take(
            self.coord.job, self.coord.index, None if up is None else up.nonce
        )
        if up is not None and self._up_ready:
            for body in lines:
                self._up_signed(body)

    def _up_signed(self, out: dict[str, Any]) -> None:
        up = self._up
        if up is None:
            return
        out.update(peer=up.peer_nonce, seq=up.seq_out)
        up.seq_out += 1
        self._send(up, encode(self._secret, out))

    # -- bytes and time -------------------------------------------------------------------

    def _send(self, side: Side, line: bytes) -> None:
        if not side.send(line, self.sel):
            self._lost(side)

    def _flush(self, side: Side) -> None:
        if not side.flush(self.sel):
            self._lost(side)

    def _lost(self, side: Side) -> None:
        if side is self._up:
            self._up_lost()
        else:
            self._close_local(side, tell=True)

    def _tick(self, now: float) -> None:
        self.refusals.flush(now)
        for side in list(self._locals):
            if side.slot is None and now - side.opened > HELLO_WAIT:
                self._refuse(side, f"no hello within {HELLO_WAIT:g}s")
                self._close_local(side, tell=False)
        if self._up is not None and not self._up_ready and now > self._up_deadline:
            self._up_failed(f"no challenge within {self._wait:g}s")
        if self.hub is not None:
            self.hub.tick(now)
        if self.link is not None:
            linked = self._up is not None and self._up_ready and self._welcomed
            self.link.tick(now, linked)
        if now >= self._next_beats:
            self._next_beats = max(self._next_beats + self._every, now)
            self._send_beats(now)

    def _send_beats(self, now: float) -> None:
        """The slots' heartbeats since the last such line, in one line: through the node's
        hub where it has a link to one (marun.job.hub_link), else up."""
        if self._up is None or not self._up_ready or not self._beats:
            return
        body = {"job": self.coord.job, "node": self.coord.index, "slot": 0, "type": "beats"}
        body["beats"] = self._beats.take(now)
        if self.link is not None and self.link.beats(body):
            return
        self._up_write(body)

    def _hub_up(self, body: dict[str, Any]) -> bool:
        """A line of this hub's group to node 0, on this node's connection (False: none now, or
        node 0 has not welcomed this node yet: it takes a hub's lines once it knows the node)."""
        if self._up is None or not self._up_ready or not self._welcomed:
            return False
        self._up_write({"job": self.coord.job, "node": self.coord.index, "slot": 0, **body})
        return True

    def _node0_alive(self) -> None:
        """Node 0's liveness, through this node's hub: to every welcomed slot, as node 0's own
        heartbeat would come (each slot's clock of node 0's silence starts again)."""
        body = {"job": self.coord.job, "node": self.coord.leader, "slot": 0, "type": "hb"}
        template = Template(self._secret, body)
        for side in self._by_slot.values():
            if side.welcomed:
                self._send(side, template.line(side.peer_nonce, side.seq_out))
                side.seq_out += 1
