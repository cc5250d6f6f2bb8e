"""Node 0's members of the job by (node, slot), kept so that what arrival asks on every hello
costs the same at 8,192 members as at 3 (docs/performance.md, "The job's coordination at
scale"): how many of a node's slots are here and how many nodes are complete are counted as
members come and go, not recomputed; the members whose connection closed are noted when it
closes, so the barrier's check of who left looks at those alone, not at every member each tick;
and each node is due for a look at silence at a time no later than its members' oldest line, so
that the tick's search for silent ones looks at the nodes due alone (`silent`), not at 32,768
members every 2 s (15 ms a walk at 4,096 x 8), and a member heard costs two attribute stores,
not a move in an ordered dict (docs/performance.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import ItemsView, Iterator, KeysView, MutableMapping, ValuesView
from dataclasses import dataclass, field, fields
from heapq import heappop, heappush
from typing import TypeVar

from marun.job.actions import Handle, Key

_T = TypeVar("_T")

_CPU_KEPT = 4096  # heartbeats of CPU figures kept per member (over an hour at one a second)


class CpuHistory:
    """A member's (monotonic, CPU seconds) figures from its heartbeats, the last _CPU_KEPT; the
    deque is made with the first figure: most jobs send none (no hang watchdog), and 32,768
    empty deques cost node 0 24 MiB (docs/performance.md)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: deque[tuple[float, float]] | None = None

    def append(self, figure: tuple[float, float]) -> None:
        if self._kept is None:
            self._kept = deque(maxlen=_CPU_KEPT)
        self._kept.append(figure)

    def __len__(self) -> int:
        return 0 if self._kept is None else len(self._kept)

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return iter(()) if self._kept is None else iter(self._kept)

    def __getitem__(self, index: int) -> tuple[float, float]:
        if self._kept is None:
            raise IndexError(index)
        return self._kept[index]


def _slotted(cls: type[_T]) -> type[_T]:
    """The dataclass `cls` made again with __slots__ and no __dict__, as dataclass(slots=True)
    does from Python 3.10 (written out: marun runs on 3.9): a member costs 64 bytes less, 2 MiB
    of node 0's RSS at 4,096 x 8 (docs/performance.md)."""
    names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    kept = {k: v for k, v in cls.__dict__.items() if k not in (*names, "__dict__", "__weakref__")}
    made: type[_T] = type(cls.__name__, cls.__bases__, {**kept, "__slots__": names})
    made.__qualname__ = cls.__qualname__
    return made


@_slotted
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
    # wall clock: when it gave up on node 0, frozen past peer_timeout (machine.stalled); its
    # lines read after the thaw were said before, so a later loss dates its end from this
    gave_up_at: float | None = None
    conn: Handle | None = None  # its connection (the shell's, opaque here); None: closed
    idle: float = 0.0  # seconds without a rank's line, as of its last heartbeat
    # (monotonic, CPU seconds its ranks have used) from its heartbeats: the hang watchdog's
    cpu_history: CpuHistory = field(default_factory=CpuHistory)
    daemons_only: bool = False
    ended: float | None = None
    outcome: str | None = None
    exit_code: int | None = None
    stacks: str | None = None
    closed_at: float = 0.0  # monotonic: when its connection last closed (conn None since)
    # restart rounds (marun.job.round_barrier): the last round it said `stopped` and `running`
    # for, and how many ranks it started then
    stopped_round: int = 0
    running_round: int = 0
    ranks: int = 0
    # hot spares (marun.job.spares): the place its processes are planned for; None: a spare
    place: int | None = None
    released: bool = False  # a spare told the job's end (marun.job.spares.release)
    lost_place: int | None = None  # the place it held when a spare took it
    leaving: bool = False  # told to stop (its pod deleted) while it held a place: it leaves it
    lost_why: str = ""  # why node 0 found it lost (said when a spare takes its place)


class Roster(MutableMapping[Key, MemberState]):
    """A dict of the members whose every change goes through __setitem__/__delitem__ (the
    MutableMapping mixins included: pop, clear, update), so the rows of each node's members (and
    the count of nodes complete) stay true whoever changes it."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._members: dict[Key, MemberState] = {}
        self.complete = 0  # nodes with every slot here
        # Members whose connection closed since arrival last looked (JobMachine.closed);
        # a set, so a member that reconnects and drops again is one entry, whatever the phase.
        self.closed: set[Key] = set()
        # Members whose connection closed after the start, until they reconnect or end: the
        # tick's CLOSED_LOST candidates (JobMachine._find_lost).
        self.unlinked: set[Key] = set()
        # node -> {slot: member}: a node's members (how many are here; silent()'s look at a node)
        self._rows: dict[int, dict[int, MemberState]] = {}
        # Silence: each node with a member not ended is due (`due`) at a time no later than the
        # last line of any of its members not ended, and sits in a heap by that time. A member
        # heard needs nothing more (its last_seen only grows: 13,107 a second at 4,096 x 8, in
        # a hub's lines); silent() looks at the nodes whose time is over the limit, finds the
        # silent among their members, and puts each back at its members' oldest line: in steady
        # state a node is looked at once a peer_timeout. (An entry whose time is not its node's
        # `due` any more is old: passed over.)
        self._due_heap: list[tuple[float, int]] = []
        self.due: dict[int, float] = {}
        # The dict's own get, for node 0's heartbeat entries (1,638 a second at 4,096 x 8: no
        # Python call each); reads only, like every read here.
        self.lookup = self._members.get
        self.row_of = self._rows.get  # (node -> {slot: member}; the hubs' lines, the same)

    def seen(self, key: Key, member: MemberState, now: float, wall: float | None = None) -> None:
        """`member` (at `key`) was heard at monotonic `now` (`now` never goes back: last_seen
        only grows, so its node's time in the heap stays no later than it)."""
        member.last_seen = now
        if wall is not None:
            member.last_seen_wall = wall
        self.node_heard(key[0], now)

    def node_heard(self, node: int, now: float) -> None:
        """A member of `node` was heard at `now`: a node not watched (new, or every member of it
        had ended) is watched from now. For a caller that sets its members' last_seen itself, a
        node at a time (machine.group_beats)."""
        if node not in self.due:
            self.watch(node, now)

    def watch(self, node: int, at: float) -> None:
        """`node` is due for a look at silence at `at` (no later than its members' oldest line
        not ended)."""
        self.due[node] = at
        heappush(self._due_heap, (at, node))

    def silent(self, now: float, limit: float) -> list[Key]:
        """The keys of the members not ended that were last heard over `limit` seconds before
        `now`, in no particular order. It looks at the nodes due over `limit` ago alone, and
        lets go of a node whose members have all ended, until one of them is heard again."""
        heap, due, rows, out = self._due_heap, self.due, self._rows, []
        again: list[tuple[float, int]] = []
        while heap and now - heap[0][0] > limit:
            at, node = heappop(heap)
            if due.get(node) != at:
                continue  # an old entry: the node is due at another time, or not watched
            del due[node]  # (watched again below: a second entry of the same time is old now)
            oldest: float | None = None
            for slot, member in rows.get(node, {}).items():
                if member.ended is not None:
                    continue
                heard = member.last_seen
                if now - heard > limit:
                    out.append((node, slot))
                if oldest is None or heard < oldest:
                    oldest = heard
            if oldest is not None:
                again.append((oldest, node))  # (after the loop: a silent one is due at once)
        for at, node in again:
            self.watch(node, at)
        return out

    def node_complete(self, node: int) -> bool:
        return len(self._rows.get(node, ())) == self.slots

    def _counted(self, before: int, after: int) -> None:
        """A node's members went from `before` to `after`: the count of nodes complete."""
        self.complete += (after == self.slots) - (before == self.slots)

    def __setitem__(self, key: Key, value: MemberState) -> None:
        node = key[0]
        row = self._rows.setdefault(node, {})
        before = len(row)
        self._members[key] = value
        row[key[1]] = value
        self._counted(before, len(row))
        due = self.due.get(node)
        if due is None or value.last_seen < due:  # (a member comes in with its first line)
            self.watch(node, value.last_seen)

    def __delitem__(self, key: Key) -> None:
        del self._members[key]
        row = self._rows[key[0]]
        del row[key[1]]
        self._counted(len(row) + 1, len(row))
        if not row:
            del self._rows[key[0]]  # (its heap entry is passed over when it comes up)
        self.unlinked.discard(key)

    # Reads go straight to the dict (the coordinator's tick walks the members).
    def __getitem__(self, key: Key) -> MemberState:
        return self._members[key]

    def __contains__(self, key: object) -> bool:
        return key in self._members

    def __iter__(self) -> Iterator[Key]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def get(self, key: Key, default: MemberState | None = None) -> MemberState | None:  # type: ignore[override]
        return self._members.get(key, default)

    def keys(self) -> KeysView[Key]:
        return self._members.keys()

    def values(self) -> ValuesView[MemberState]:
        return self._members.values()

    def items(self) -> ItemsView[Key, MemberState]:
        return self._members.items()

    def __repr__(self) -> str:
        return f"Roster({self._members!r})"
