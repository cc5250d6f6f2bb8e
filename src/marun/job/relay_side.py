"""The relay's connections (marun.job.relay): a `Side` per socket (node 0's, or a slot's
marun's), whose lines out never wait (what the socket does not take now waits in its buffer,
bounded); the slots' heartbeats kept until the next `beats` line (`BeatBook`) and their hellos
until the turn's `hellos` line (`HelloBatch`); where a node's relay listens (`relay_address`,
`listen_local`), how it reaches node 0 (`dial`), what it checks of a line of node 0's
(`leader_line`) and of a slot's hello (`slot_refusal`); and node 0's reading of a `beats` and a
`hellos` line (`beats_of`, `hellos_of`)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import math
import selectors
import socket
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from marun.job.actions import NodeBeats
from marun.job.limits import OUTPUT_LIMIT
from marun.job.messages import Hello, hello_of
from marun.job.protocol import (
    MAX_HELLO_LINE,
    TO,
    LineBuffer,
    ProtocolError,
    check_fields,
    decode,
    fresh,
    is_int,
    new_nonce,
)
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

    def connected(self, sel: selectors.BaseSelector) -> str | None:
        """A connection `dial` began is made (None: its lines may be read), or why not."""
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            return errno.errorcode.get(err, str(err))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sel.modify(self.sock, selectors.EVENT_READ, self)
        self.peer_nonce = ""  # (no challenge read yet)
        return None

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


# What a slot may say (its own messages); the relay's own (`beats`, `gone`) it may not.
SLOT_SAYS = frozenset(
    ("hello", "hb", "failure", "stopped", "running", "stacks", "end", "preflight", "link")
)
HELLOS_MOST = 8  # hellos in one `hellos` line (a node's 8 devices; 16 in two lines)
_SAID_ONCE = frozenset(("job", "node", "type", "peer", "seq", "nonce"))  # by a `hellos` line

# a `beats` entry: slot, idle, cpu, progress (Optional: an alias is evaluated, on 3.9 too)
SlotBeat = tuple[int, float, Optional[float], Optional[dict[str, Any]]]


class HelloBatch:
    """The slots' hellos since the last `hellos` line: taken as that line (or lines, at most
    HELLOS_MOST hellos each), each hello less what the line says once for all."""

    def __init__(self) -> None:
        self._hellos: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._hellos)

    def add(self, body: dict[str, Any]) -> None:
        self._hellos.append({k: v for k, v in body.items() if k not in _SAID_ONCE})

    def clear(self) -> None:
        self._hellos = []

    def take(self, job: str, node: int, nonce: str | None) -> list[dict[str, Any]]:
        hellos, self._hellos = self._hellos, []
        line = {"job": job, "node": node, "slot": 0, "type": "hellos", "nonce": nonce}
        return [
            {**line, "hellos": hellos[i : i + HELLOS_MOST]}
            for i in range(0, len(hellos), HELLOS_MOST)
        ]


def slot_refusal(coord: Coordination, hello: dict[str, Any], there: str | None) -> str | None:
    """Why the relay turns a slot's hello away (None: it takes it): not this node's slot, or a
    slot whose marun talks here already (`there`: its instance), from another marun."""
    node, slot = hello["node"], hello["slot"]
    if node != coord.index or not 0 <= slot < coord.slots:
        return f"node {node} slot {slot} is not this node's (node {coord.index})"
    if there is not None and there != hello.get("instance"):
        return (
            f"node {node} slot {slot} is here already (its marun talks to this node's relay): "
            "this marun belongs to another job, or is one too many"
        )
    return None


def leader_line(
    secret: bytes, job: str, up: Side, line: bytes
) -> tuple[dict[str, Any], list[int] | None]:
    """A line of node 0's on the node's connection `up`, checked (this job's, signed, the
    connection's next), and the slots it is for (`to`: one, or a list, as node 0 welcomes a
    `hellos` line's slots in one line; None: every slot node 0 welcomed); ProtocolError for
    anything else."""
    body = decode(secret, job, line)
    up.seq_in = fresh(body, up.nonce, up.seq_in)
    to = body.pop(TO, None)
    if to is None:
        return body, None
    slots = [to] if type(to) is int else to
    if type(slots) is not list or not slots or any(type(slot) is not int for slot in slots):
        raise ProtocolError(f"{TO!r} is not a slot or a list of slots")
    return body, slots


def listen_local(address: str, backlog: int) -> socket.socket:
    """The relay's local socket, listening (OSError: another marun of this node has it)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(backlog)
    listener.setblocking(False)
    return listener


def dial(target: tuple[str, int]) -> socket.socket | str:
    """A TCP connection to `target` begun (not waited for), or why none could be."""
    try:
        info = socket.getaddrinfo(*target, socket.AF_INET, socket.SOCK_STREAM)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:
        return exc.strerror or str(exc)
    sock.setblocking(False)
    err = sock.connect_ex(info[0][4])
    if err not in (0, errno.EINPROGRESS):
        sock.close()
        return errno.errorcode.get(err, str(err))
    return sock


def beats_of(value: object, slots: int) -> list[SlotBeat]:
    """A `beats` line's entries as (slot, idle, cpu, progress), idle at least 0; ValueError for
    anything that is not one (node 0 refuses the line): at most `slots` entries, each [slot,
    idle, cpu, progress].

    Node 0 reads one of these per node per heartbeat interval (8 entries each; 1,638 entries a
    second at 4,096 x 8), so the checks are the cheapest exact ones: `type(x) is int` refuses a
    bool as `is_int` does, and JSON's numbers are int or float, nothing else."""
    if type(value) is not list or len(value) > slots:
        raise ValueError("beats: not a list of at most one entry per slot")
    out: list[SlotBeat] = []
    for entry in value:
        if type(entry) is not list or len(entry) != 4:
            raise ValueError("beats: an entry is not [slot, idle, cpu, progress]")
        slot, idle, cpu, progress = entry
        if type(slot) is not int or not 0 <= slot < slots:
            raise ValueError("beats: a slot out of range")
        if not _finite(idle) or not (cpu is None or _finite(cpu)):
            raise ValueError("beats: idle or cpu is not a number")
        if not (progress is None or type(progress) is dict):
            raise ValueError("beats: progress is not an object")
        idle = float(idle) if idle > 0 else 0.0
        out.append((slot, idle, None if cpu is None else float(cpu), progress))
    return out


def group_beats_of(value: object, nodes: range, slots: int) -> list[NodeBeats]:
    """A hub's `groupbeats` line's heartbeats as (node, idles, cpus, steps), an idle at least 0
    and a float; ValueError for anything that is not one (node 0 refuses the line). The line
    holds one entry a node of the hub's group (`nodes`), each at most once: [node, idles, cpus,
    steps], each list one item a slot (idles: a number, or null where the slot did not beat;
    cpus and steps: null where no slot has one). A node's entry, not a slot's, on the wire (a
    third of the JSON) and after (no object a slot: 13,107 slots a second at 4,096 x 8); the
    steps as they came, dicts (marun.job.actions.NodeBeats)."""
    if type(value) is not list or len(value) > len(nodes):
        raise ValueError("groupbeats: not a list of at most one entry per node of the group")
    out: list[NodeBeats] = []
    seen: set[int] = set()
    for entry in value:
        if type(entry) is not list or len(entry) != 4:
            raise ValueError("groupbeats: an entry is not [node, idles, cpus, steps]")
        node, idles, cpus, steps = entry
        if type(node) is not int or node not in nodes:
            raise ValueError(f"groupbeats: node {str(node)[:20]} is not of this hub's group")
        if node in seen:
            raise ValueError(f"groupbeats: node {node} twice")
        seen.add(node)
        for name, items in (("idles", idles), ("cpus", cpus), ("steps", steps)):
            if (items is not None or name == "idles") and not (
                type(items) is list and len(items) == slots
            ):
                raise ValueError(f"groupbeats: {name} is not a list of one item per slot")
        if cpus is None and steps is None:  # (most lines: idles alone, checked in one loop)
            for slot, said in enumerate(idles):
                kind = type(said)
                if kind is float:
                    if not math.isfinite(said):
                        raise ValueError("groupbeats: idle or cpu is not a number")
                    if said <= 0:  # (-0.0 too: 0.0, as every other path makes it)
                        idles[slot] = 0.0
                elif kind is int:
                    idles[slot] = float(said) if said > 0 else 0.0
                elif said is not None:
                    raise ValueError("groupbeats: idle or cpu is not a number")
            out.append((node, idles, None, None))
            continue
        taken: list[Optional[float]] = [None] * slots
        taken_cpus: list[Optional[float]] = [None] * slots
        for slot, said in enumerate(idles):
            cpu = None if cpus is None else cpus[slot]
            progress = None if steps is None else steps[slot]
            if said is None:
                if cpu is not None or progress is not None:
                    raise ValueError("groupbeats: a cpu or steps of a slot that did not beat")
                continue
            if not _finite(said) or not (cpu is None or _finite(cpu)):
                raise ValueError("groupbeats: idle or cpu is not a number")
            if not (progress is None or type(progress) is dict):
                raise ValueError("groupbeats: progress is not an object")
            taken[slot] = float(said) if said > 0 else 0.0
            taken_cpus[slot] = None if cpu is None else float(cpu)
        out.append((node, taken, None if cpus is None else taken_cpus, steps))
    return out


def hellos_of(body: dict[str, Any], slots: int) -> list[Hello]:
    """A `hellos` line's hellos, each as the `hello` line of its slot would give (the line's
    node; its nonce and job checked with the line); ProtocolError for anything that is not one
    (node 0 refuses the line). An entry's fields are checked as a `hello` line's, in place: no
    line of each is made (32,768 at 4,096 x 8)."""
    items = body.get("hellos")
    if not isinstance(items, list) or not 0 < len(items) <= min(slots, HELLOS_MOST):
        raise ProtocolError(f"hellos: not a list of 1 to {min(slots, HELLOS_MOST)} hellos")
    out, seen, node = [], set(), int(body["node"])
    for item in items:
        if not isinstance(item, dict):
            raise ProtocolError("hellos: an entry is not an object")
        slot = item.get("slot")
        if not isinstance(slot, int) or not is_int(slot) or not 0 <= slot < slots or slot in seen:
            raise ProtocolError("hellos: a slot out of range, or twice")
        seen.add(slot)
        check_fields("hello", item)  # (a relay's entry has no nonce: the line says it once)
        out.append(hello_of(node, slot, item))
    return out


def _finite(value: object) -> bool:
    kind = type(value)
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    return kind is int  # (a bool is not: its type is bool)
