"""Liveness hubs, the relays' side (marun.plan.hubs; docs/supervision.md, "Liveness through
hubs"). In a job of more than 1,024 nodes each group of 64 beats node 0 through its first node:

- `HubServer`, in the hub's relay: listens on the hub's port, takes its group's relays (a
  challenge, their `hublink`, then their `beats` only, each line checked as node 0 checks it),
  hands their slots' heartbeats to node 0 in one `groupbeats` line every eighth of an interval,
  and node 0's liveness back: each time it hears node 0 (at most every quarter interval) a `hb`
  to each of them. It has no other part in the job: without node 0 it closes them all.
- `HubLink`, in the relay of every other node of a group: once its node is welcomed, a
  connection to its hub, its `beats` through it and node 0's `hb` from it; on any trouble (the
  hub unreachable, refusing, closed, or silent for half an interval: `silent_limit`) it closes
  the link, beats node 0 itself again from its next `beats` line on, and tries the hub again
  one to two intervals later.

Each node's own connection to node 0 carries everything else and is never given up: the hubs
only save node 0 lines, and what happens to a hub costs its group nothing but its savings.
"""

from __future__ import annotations

import contextlib
import random
import selectors
import socket
import time
from typing import Any, Callable

from marun.job.conns import AllowedHosts
from marun.job.handshake import check_challenge
from marun.job.limits import HELLO_WAIT, RefusalLog
from marun.job.protocol import (
    MAX_LINE,
    PROTOCOL,
    ProtocolError,
    decode,
    encode,
    fresh,
    is_nonce,
    new_nonce,
)
from marun.job.relay_side import Side, SlotBeat, beats_of, dial, forget
from marun.job.signing import Template
from marun.plan.coordination import Coordination
from marun.plan.hubs import group_of, hub_of, hub_port

FORWARD_PARTS = 8  # a hub sends what its group said every 1/8 of an interval
# ... node 0's liveness at most every 1/4 of one, and a line of its own (`hubbeat`) where it
# sent its group nothing for that long.
RELAY_PARTS = 4
RESOLVE_AGAIN = 10  # intervals before a hub's name that did not resolve is tried again
SILENT_FLOOR = 5.0  # seconds: a hub silent this long may be left (a busy host's stall, else)


def silent_limit(every: float, peer_timeout: float) -> float:
    """How long a node's link waits on a silent hub before it beats node 0 itself again. Node 0
    hears a node of a frozen hub's group at the latest 2 1/8 intervals and this after its last
    beat through the hub (1 1/8 to the last line the hub sent up, this to leave the hub, 1 to the
    node's next own `beats`), which must stay within peer_timeout (at least 3 intervals,
    marun.job.heartbeat): half an interval in a large job, SILENT_FLOOR where peer_timeout
    leaves room for it (a small job's interval is 1 s)."""
    room = (peer_timeout - 2.125 * every) / 2
    return max(every / 2, min(SILENT_FLOOR, room))


class HubServer:
    """The hub's part in its relay (the relay's loop drives it: accept, event, tick)."""

    def __init__(
        self,
        coord: Coordination,
        secret: bytes,
        sel: selectors.BaseSelector,
        every: float,
        up: Callable[[dict[str, Any]], bool],
        refusals: RefusalLog,
        log: Callable[..., None],
    ) -> None:
        self.coord = coord
        self._secret = secret
        self._sel = sel
        self._every = every
        self._up = up  # a line to node 0 through the relay's connection (False: it has none)
        self._refusals = refusals
        self._log = log
        self.group = group_of(coord, coord.index)
        self._allowed = AllowedHosts(coord.hosts)  # (node 0's rule for its own port)
        self.most = 2 * len(self.group) + 8  # (a relay reconnecting overlaps its old link)
        self.children: dict[Side, int | None] = {}  # each link and its node (None: no hublink)
        self._by_node: dict[int, Side] = {}
        # each node's entry of the next `groupbeats` line: [node, idles, cpus, steps], each
        # slot's last heartbeat since the last line (whatever a node sent: one entry a node)
        self._entries: dict[int, list[Any]] = {}
        self._next_forward = time.monotonic() + every / FORWARD_PARTS
        self._relayed = 0.0  # monotonic: node 0's liveness last handed on
        self._said_at = 0.0  # monotonic: the last line to the group (node 0's, or a hubbeat)
        self.listener: socket.socket | None = None
        sock = None
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("", hub_port(coord, coord.index)))
            sock.listen(self.most)
            sock.setblocking(False)
        except OSError as exc:
            if sock is not None:
                sock.close()
            # Its group beats node 0 directly: a cost, not a fault (one line in the log).
            log("job_hub_not_listening", "warning", port=hub_port(coord, coord.index),
                error=exc.strerror or str(exc))  # fmt: skip
            return
        self.listener = sock
        sel.register(sock, selectors.EVENT_READ, self)

    def accept(self) -> None:
        assert self.listener is not None
        for _ in range(self.most):
            try:
                sock, peer = self.listener.accept()
            except OSError:  # (none waiting; EMFILE: the next turn)
                return
            why = None if self._allowed(str(peer[0])) else "hub: not from one of the job's hosts"
            if len(self.children) >= self.most:
                why = f"hub: {len(self.children)} links open"
            if why is not None:
                self._refusals.refuse(str(peer[0]), why)
                sock.close()
                continue
            sock.setblocking(False)
            with contextlib.suppress(OSError):  # node 0's liveness goes on as it comes
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            side = Side(sock)
            self.children[side] = None
            self._sel.register(sock, selectors.EVENT_READ, side)
            said = {"nonce": side.nonce, "instance": new_nonce(), "version": PROTOCOL}
            self._send(side, self._line(side, "challenge", **said))

    def event(self, side: Side, mask: int) -> None:
        if mask & selectors.EVENT_WRITE and not side.flush(self._sel):
            self._close(side)
            return
        if not mask & selectors.EVENT_READ or side not in self.children:
            return
        data = side.recv()
        if data is None:
            return
        if not data:  # its relay went (or left for node 0 directly)
            self._close(side)
            return
        try:
            for line in side.buf.feed(data):
                if side not in self.children:
                    return
                body = decode(self._secret, self.coord.job, line)
                side.seq_in = fresh(body, side.nonce, side.seq_in)
                self._said(side, body)
        except (ProtocolError, ValueError) as exc:
            self._refuse(side, f"hub: {exc}")
            self._close(side)

    def _said(self, side: Side, body: dict[str, Any]) -> None:
        node, kind = self.children[side], body["type"]
        if node is None:
            if kind != "hublink" or not is_nonce(body.get("nonce")):
                raise ProtocolError(f"{kind} before hublink")
            if body.get("version") != PROTOCOL:
                raise ProtocolError(f"protocol {body.get('version')!r}, not {PROTOCOL}")
            if body["node"] not in self.group:
                raise ProtocolError(f"node {body['node']} is not of this hub's group")
            node = self.children[side] = int(body["node"])
            side.peer_nonce, side.buf.limit = str(body["nonce"]), MAX_LINE
            old = self._by_node.get(node)
            if old is not None:
                self._close(old)  # the same node's relay again: its old link
            self._by_node[node] = side
        elif kind != "beats" or body["node"] != node:
            raise ProtocolError(f"{kind} of node {body['node']} on node {node}'s link")
        else:
            self._take(node, beats_of(body.get("beats"), self.coord.slots))

    def _take(self, node: int, beats: list[SlotBeat]) -> None:
        """A node's slots' heartbeats into its entry of the next `groupbeats` line."""
        slots = self.coord.slots
        entry = self._entries.get(node)
        if entry is None:
            entry = self._entries[node] = [node, [None] * slots, None, None]
        idles = entry[1]
        for slot, idle, cpu, progress in beats:
            idles[slot] = idle
            for at, value in ((2, cpu), (3, progress)):  # (a list only where one has some)
                if value is not None and entry[at] is None:
                    entry[at] = [None] * slots
                if entry[at] is not None:
                    entry[at][slot] = value

    def heard_node0(self, now: float) -> None:
        """A line of node 0's came: its liveness to the group (the members' clocks of node 0's
        silence are reset by it, as by node 0's own heartbeat)."""
        if now - self._relayed < self._every / RELAY_PARTS:
            return
        self._relayed = now
        self._to_group(now, {"node": self.coord.leader, "type": "hb"})

    def _to_group(self, now: float, said: dict[str, Any]) -> None:
        self._said_at = now
        template = Template(self._secret, {"job": self.coord.job, "slot": 0, **said})
        for side, node in list(self.children.items()):
            if node is not None:
                self._send(side, template.line(side.peer_nonce, side.seq_out))
                side.seq_out += 1

    def tick(self, now: float) -> None:
        for side, node in list(self.children.items()):
            if node is None and now - side.opened > HELLO_WAIT:
                self._refuse(side, f"hub: no hublink within {HELLO_WAIT:g}s")
                self._close(side)
        if now - self._said_at >= self._every / RELAY_PARTS:
            self._to_group(now, {"node": self.coord.index, "type": "hubbeat"})
        if now < self._next_forward:
            return
        self._next_forward = max(self._next_forward + self._every / FORWARD_PARTS, now)
        entries, self._entries = list(self._entries.values()), {}
        if entries and not self._up({"type": "groupbeats", "nodes": entries}):
            self.close_links()  # no node 0 to hand them to: its group beats node 0 itself

    def close_links(self) -> None:
        for side in list(self.children):
            self._close(side)
        self._entries = {}

    def close(self) -> None:
        self.close_links()
        if self.listener is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(self.listener)
            self.listener.close()
            self.listener = None

    def _close(self, side: Side) -> None:
        node = self.children.pop(side, None)
        if node is not None and self._by_node.get(node) is side:
            del self._by_node[node]
        forget(self._sel, side)

    def _line(self, side: Side, kind: str, **said: object) -> bytes:
        body = {"job": self.coord.job, "node": self.coord.index, "slot": 0, **said, "type": kind}
        side.seq_out += 1
        return Template(self._secret, body).line(side.peer_nonce, side.seq_out - 1)

    def _send(self, side: Side, line: bytes) -> None:
        if not side.send(line, self._sel):
            self._close(side)

    def _refuse(self, side: Side, why: str) -> None:
        node = self.children.get(side)
        self._refusals.refuse("?" if node is None else f"node {node}", why)


class HubLink:
    """A group node's link to its hub (its relay's loop drives it: event, tick, beats)."""

    def __init__(
        self,
        coord: Coordination,
        secret: bytes,
        host: str,
        sel: selectors.BaseSelector,
        every: float,
        heard_node0: Callable[[], None],
        log: Callable[..., None],
    ) -> None:
        hub = hub_of(coord, coord.index)
        assert hub is not None
        self.coord = coord
        self._secret = secret
        self._host = host
        self._sel = sel
        self._every = every
        self._heard_node0 = heard_node0  # node 0's liveness, through the hub: to the slots
        self._log = log
        self.hub = hub
        self._host_of_hub = coord.hub_hosts[hub // coord.hub_group - 1]
        self._address: str | None = None  # the hub's, resolved once (a relay's loop never waits
        # on a resolver again: a name that does not resolve is tried every RESOLVE_AGAIN tries)
        self._silent = silent_limit(every, coord.peer_timeout)
        self.side: Side | None = None
        self.ready = False  # hublink said: beats go through the hub
        self._deadline = 0.0
        self._last_in = 0.0
        self._next_try = 0.0
        self.links = 0  # links made (tests, logs)
        self._why: str | None = None  # the last trouble logged (once per kind)

    def beats(self, body: dict[str, Any]) -> bool:
        """The node's `beats` line through the hub (False: no link; the relay sends it up)."""
        side = self.side
        if side is None or not self.ready:
            return False
        out = {**body, "peer": side.peer_nonce, "seq": side.seq_out}
        side.seq_out += 1
        if not side.send(encode(self._secret, out), self._sel):
            self.drop("its link broke")
            return False
        return True

    def tick(self, now: float, linked: bool) -> None:
        """`linked`: the node is welcomed on its connection to node 0 (only then a hub link)."""
        if not linked:
            if self.side is not None:
                self.drop(None)
            return
        side = self.side
        if side is None:
            if now >= self._next_try:
                self._connect(now)
        elif not self.ready and now > self._deadline:
            self.drop("no challenge in time")
        elif self.ready and now - self._last_in > self._silent:
            self.drop(f"silent for {self._silent:g}s")

    def event(self, side: Side, mask: int) -> None:
        if side is not self.side:
            return
        if side.peer_nonce is None and mask & selectors.EVENT_WRITE:
            why = side.connected(self._sel)  # (its challenge next)
            if why is not None:
                self.drop(f"cannot connect: {why}")
            return
        if mask & selectors.EVENT_WRITE and not side.flush(self._sel):
            self.drop("its link broke")
            return
        if not mask & selectors.EVENT_READ:
            return
        data = side.recv()
        if data is None:
            return
        try:
            if not data:
                raise ProtocolError("closed by the hub")
            for line in side.buf.feed(data):
                if self.side is not side:
                    return
                self._line(side, line)
        except ProtocolError as exc:
            self.drop(str(exc))

    def _line(self, side: Side, line: bytes) -> None:
        now = time.monotonic()
        if not self.ready:
            nonce, side.seq_in = check_challenge(
                line, side.sock, self._secret, self.coord, self._host
            )
            side.peer_nonce, side.buf.limit = nonce, MAX_LINE
            hello = {"job": self.coord.job, "node": self.coord.index, "slot": 0,
                     "type": "hublink", "nonce": side.nonce, "version": PROTOCOL,
                     "peer": nonce, "seq": side.seq_out}  # fmt: skip
            side.seq_out += 1
            if not side.send(encode(self._secret, hello), self._sel):
                raise ProtocolError("its link broke")
            self.ready, self._last_in, self._why = True, now, None
            self.links += 1
            self._log("job_hub_linked", "info", hub=self.hub)
            return
        body = decode(self._secret, self.coord.job, line)
        side.seq_in = fresh(body, side.nonce, side.seq_in)
        kind, node = body["type"], body["node"]
        if (kind, node) == ("hb", self.coord.leader):
            self._heard_node0()  # node 0's liveness, handed on by the hub as it came
        elif (kind, node) != ("hubbeat", self.hub):
            raise ProtocolError(f"{kind} of node {node} from the hub")
        self._last_in = now

    def _connect(self, now: float) -> None:
        if self._address is None:
            try:
                info = socket.getaddrinfo(self._host_of_hub, None, socket.AF_INET)
            except OSError as exc:
                self.drop(f"its address {self._host_of_hub!r} does not resolve ({exc})")
                self._next_try += RESOLVE_AGAIN * self._every
                return
            self._address = str(info[0][4][0])
        sock = dial((self._address, hub_port(self.coord, self.hub)))
        if isinstance(sock, str):
            self.drop(f"cannot connect: {sock}")
            return
        self.side = Side(sock)
        self.ready = False
        self._deadline = now + 2.0 + self._every / FORWARD_PARTS
        self._sel.register(sock, selectors.EVENT_WRITE, self.side)

    def drop(self, why: str | None) -> None:
        """Back to beating node 0 directly; the hub tried again in one to two intervals.
        `why` None: the node's own connection went (its slots say hello again)."""
        side, self.side = self.side, None
        was_ready, self.ready = self.ready, False
        if side is not None:
            forget(self._sel, side)
        self._next_try = time.monotonic() + self._every * random.uniform(1.0, 2.0)
        if why is not None and (was_ready or why != self._why):
            self._why = why
            self._log("job_hub_left", "info", hub=self.hub, reason=why)

    def close(self) -> None:
        side, self.side = self.side, None
        if side is not None:
            forget(self._sel, side)
