"""A node's relay's slots' side (marun.job.relay): every marun of the node connects to it on a
local socket; each is challenged in node 0's voice, says hello for its slot (this node's, and
one marun per slot), and its lines go up to node 0 (its heartbeats kept for the next `beats`
line); a slot that leaves is told to node 0 (`gone`)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from typing import Any

from marun.job.limits import RefusalLog
from marun.job.protocol import MAX_LINE, PROTOCOL, ProtocolError, decode, fresh, is_nonce
from marun.job.relay_side import SLOT_SAYS, BeatBook, Side, forget, slot_refusal
from marun.job.signing import Template
from marun.plan.coordination import Coordination


class SlotsSide:
    """The relay's part that speaks to its node's slots (the relay's loop drives it)."""

    # the relay's (marun.job.relay.Relay)
    coord: Coordination
    _secret: bytes
    sel: selectors.BaseSelector
    _listener: socket.socket
    _locals: set[Side]
    _by_slot: dict[int, Side]
    _beats: BeatBook
    _up_ready: bool
    instance: str
    refusals: RefusalLog

    def _up_send(self, side: Side, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _up_write(self, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _send(self, side: Side, line: bytes) -> None:
        raise NotImplementedError

    def _flush(self, side: Side) -> None:
        raise NotImplementedError

    def _accept(self) -> None:
        for _ in range(2 * self.coord.slots + 8):
            try:
                sock, _ = self._listener.accept()
            except OSError:  # (BlockingIOError: none waiting; EMFILE: the next turn)
                return
            if len(self._locals) >= 2 * self.coord.slots + 8:
                self._refuse(None, f"too many local connections ({len(self._locals)} open)")
                sock.close()
                continue
            sock.setblocking(False)
            side = Side(sock)
            self._locals.add(side)
            self.sel.register(sock, selectors.EVENT_READ, side)
            said = {"nonce": side.nonce, "instance": self.instance, "version": PROTOCOL}
            self._send(side, self._as_leader(side, "challenge", **said))

    def _local_event(self, side: Side, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush(side)
        if not mask & selectors.EVENT_READ or side not in self._locals or side.closing:
            return
        data = side.recv()
        if data is None:
            return
        if not data:
            self._close_local(side, tell=True)
            return
        try:
            lines = side.buf.feed(data)
        except ProtocolError as exc:
            self._refuse(side, str(exc))
            self._close_local(side, tell=True)
            return
        for line in lines:
            if side not in self._locals or side.closing:
                return
            try:
                body = decode(self._secret, self.coord.job, line)
                side.seq_in = fresh(body, side.nonce, side.seq_in)
            except ProtocolError as exc:
                self._refuse(side, str(exc))
                self._close_local(side, tell=True)
                return
            self._from_slot(side, body)

    def _from_slot(self, side: Side, body: dict[str, Any]) -> None:
        kind = body["type"]
        if side.slot is None:
            self._hello(side, body)
            return
        if kind not in SLOT_SAYS or kind == "hello":
            why = "a second hello" if kind == "hello" else f"{kind!r} is not a slot's to say"
            self._refuse(side, why)
            self._close_local(side, tell=True)
        elif body["node"] != self.coord.index or body["slot"] != side.slot:
            self._refuse(side, f"a line of node {body['node']} slot {body['slot']}")
            self._close_local(side, tell=True)
        elif kind == "hb":
            self._beats.add(side.slot, body, time.monotonic())
        else:
            self._up_send(side, body)

    def _hello(self, side: Side, body: dict[str, Any]) -> None:
        """A slot's first line: who it is. Not this node's, or a second marun for a slot whose
        marun talks here: turned away with one line on each side."""
        coord = self.coord
        node, slot = body["node"], body["slot"]
        if body["type"] != "hello" or not is_nonce(body.get("nonce")):
            self._refuse(side, f"{body['type']} before hello")
            self._close_local(side, tell=False)
            return
        side.peer_nonce = str(body["nonce"])
        other = self._by_slot.get(slot) if node == coord.index else None
        why = slot_refusal(coord, body, None if other is None else other.instance)
        if why is not None:
            self._turn_away(side, why)
            return
        if other is not None:
            self._close_local(other, tell=True)  # the same marun again: its old connection
        side.slot, side.instance = slot, str(body.get("instance", ""))
        side.buf.limit = MAX_LINE
        self._by_slot[slot] = side
        self._up_send(side, body)

    def _close_local(self, side: Side, *, tell: bool) -> None:
        """A slot's connection closed; `tell`: node 0 hears that its slot left (`gone`)."""
        if side not in self._locals:
            return
        self._locals.discard(side)
        forget(self.sel, side)
        slot = side.slot
        if slot is None or self._by_slot.get(slot) is not side:
            return
        del self._by_slot[slot]
        self._beats.drop(slot)
        if tell and self._up_ready and not side.pending:
            self._up_write(
                {"job": self.coord.job, "node": self.coord.index, "slot": slot, "type": "gone"}
            )

    def _turn_away(self, side: Side, why: str) -> None:
        self._refuse(side, why)
        with contextlib.suppress(OSError):
            side.sock.send(self._as_leader(side, "refused", why=why))
        self._close_local(side, tell=False)

    def _as_leader(self, side: Side, kind: str, **said: object) -> bytes:
        """A line of the relay's own to a slot, in node 0's voice (as from node 0's port)."""
        body = {"job": self.coord.job, "node": self.coord.leader, "slot": 0, **said, "type": kind}
        side.seq_out += 1
        return Template(self._secret, body).line(side.peer_nonce, side.seq_out - 1)

    def _refuse(self, side: Side | None, why: str) -> None:
        slot = "?" if side is None or side.slot is None else side.slot
        self.refusals.refuse(f"local (slot {slot})", why)
