"""The relay's connections (marun.job.relay): a `Side` per socket (node 0's, or a slot's
marun's), whose lines out never wait (what the socket does not take now waits in its buffer,
bounded); the slots' heartbeats kept until the next `beats` line (`BeatBook`); and where a
node's relay listens (`relay_address`); and node 0's reading of a `beats` line (`beats_of`)."""

from __future__ import annotations

import contextlib
import hashlib
import math
import selectors
import socket
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from marun.job.limits import OUTPUT_LIMIT
from marun.job.protocol import MAX_HELLO_LINE, LineBuffer, new_nonce
from marun.plan.coordination import Coordination


def relay_address(coord: Coordination) -> str:
    """The node's relay's local socket: an abstract Unix socket (no file; gone with its
    process), named after the job, node 0's port and the node, so two jobs or two nodes on one
    host (marun simulate, the tests) never meet."""
    digest = hashlib.sha256(f"{coord.job}|{coord.port}|{coord.index}".encode()).hexdigest()
    return f"\0marun-relay-{digest[:32]}"


@dataclass(eq=False)
class Side:
    """One connection of the relay's: node 0 (`up`) or a slot's marun (local)."""

    sock: socket.socket
    buf: LineBuffer = field(default_factory=lambda: LineBuffer(MAX_HELLO_LINE))
    nonce: str = field(default_factory=new_nonce)  # ours: every line in must name it
    peer_nonce: str | None = None  # theirs: every line out names it
    seq_in: int = -1
    seq_out: int = 0
    out: bytearray = field(default_factory=bytearray)
    opened: float = field(default_factory=time.monotonic)
    closing: bool = False  # closed once its output is out
    # a slot's
    slot: int | None = None  # its hello was taken
    instance: str = ""
    welcomed: bool = False  # node 0 welcomed it: broadcasts go to it
    pending: list[dict[str, Any]] = field(default_factory=list)  # while the node has no link

    def recv(self) -> bytes | None:
        """(None: nothing now; b"": closed)"""
        try:
            return self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return b""

    def send(self, line: bytes, sel: selectors.BaseSelector) -> bool:
        """Never waits: what the socket does not take now waits in `out` (False: the
        connection is lost, or over OUTPUT_LIMIT waits)."""
        if self.out:
            self.out += line
        else:
            try:
                sent = self.sock.send(line)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                return False
            if sent == len(line):
                return True
            self.out += line[sent:]
            sel.modify(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, self)
        return len(self.out) <= OUTPUT_LIMIT

    def flush(self, sel: selectors.BaseSelector) -> bool:
        """The socket is writable: as much of `out` as it takes (False: lost)."""
        try:
            sent = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        del self.out[:sent]
        if not self.out:
            sel.modify(self.sock, selectors.EVENT_READ, self)
        return True

    def close_after(self, end: float) -> None:
        """What waits goes out, until monotonic `end` at most; then closed."""
        with contextlib.suppress(OSError):
            self.sock.setblocking(True)
            self.sock.settimeout(max(0.01, end - time.monotonic()))
            if self.out:
                self.sock.sendall(self.out)
        self.sock.close()


def log_bug(log: Callable[..., None], event: str, exc: Exception) -> None:
    """An unexpected exception, logged whole (the thread goes on)."""
    log(
        event,
        "error",
        error=f"{type(exc).__name__}: {exc}"[:300],
        traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:],
    )


def forget(sel: selectors.BaseSelector, side: Side) -> None:
    with contextlib.suppress(KeyError, ValueError, OSError):
        sel.unregister(side.sock)
    side.sock.close()


class BeatBook:
    """Each slot's last heartbeat since the last `beats` line, and when it came: taken as that
    line's entries, [slot, idle, cpu, progress], each idle time aged by its wait here."""

    def __init__(self) -> None:
        self._beats: dict[int, tuple[float, dict[str, Any]]] = {}

    def __bool__(self) -> bool:
        return bool(self._beats)

    def add(self, slot: int, body: dict[str, Any], now: float) -> None:
        self._beats[slot] = (now, body)

    def drop(self, slot: int) -> None:
        self._beats.pop(slot, None)

    def take(self, now: float) -> list[list[Any]]:
        beats, self._beats = self._beats, {}
        entries = []
        for slot, (heard, body) in sorted(beats.items()):
            idle = float(body.get("idle", 0.0)) + (now - heard)
            entries.append([slot, round(idle, 2), body.get("cpu"), body.get("progress")])
        return entries


def beats_of(value: object, slots: int) -> list[tuple[int, dict[str, Any]]]:
    """A `beats` line's entries as (slot, an `hb` line's fields); ValueError for anything that is
    not one (node 0 refuses the line): at most `slots` entries, each [slot, idle, cpu, progress]."""
    if not isinstance(value, list) or len(value) > slots:
        raise ValueError("beats: not a list of at most one entry per slot")
    out = []
    for entry in value:
        if not isinstance(entry, list) or len(entry) != 4:
            raise ValueError("beats: an entry is not [slot, idle, cpu, progress]")
        slot, idle, cpu, progress = entry
        if not _is_int(slot) or not 0 <= slot < slots:
            raise ValueError("beats: a slot out of range")
        if not _finite(idle) or not (cpu is None or _finite(cpu)):
            raise ValueError("beats: idle or cpu is not a number")
        if not (progress is None or isinstance(progress, dict)):
            raise ValueError("beats: progress is not an object")
        fields: dict[str, Any] = {"idle": idle}
        if cpu is not None:
            fields["cpu"] = cpu
        if progress is not None:
            fields["progress"] = progress
        out.append((slot, fields))
    return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)
