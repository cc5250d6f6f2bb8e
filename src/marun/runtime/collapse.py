"""Collapsed lines on the console (docs/supervision.md, "Collapsed lines"): a line that several
of a node's ranks print within `window` seconds is shown once, naming them all
(`[0:0-7] Loading dataset`). The log files are not touched: each keeps every line of its rank.

Each line is held at most `window` seconds (a thread writes out what is due; the end of the last
stream writes out everything held: marun may end next), in a queue of groups, one group per
text shown: a rank's line joins the oldest group of the same text that it is not in yet and
that is newer than its own latest group, else it opens a new group. Groups go out in the order
they were opened, so each rank's lines keep their order, and lines that differ never collapse.

A rank that prints more than `FLOOD_BYTES` within one window (a flood: a rank writing as fast
as it can) is not looked at line by line until a whole window passes with less: what is held
goes out first, then each of its reads as it comes, prefixed as without collapsing. Collapsing
costs per line; a flood is not what it is for (a flood's lines are its rank's own), and the
relay must not get slower for it.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from marun.runtime.output import MAIN_THREAD_SIGNALS, Bytes, Console

DEFAULT_WINDOW = 0.5  # seconds a line may wait for the same line of other ranks
FLOOD_BYTES = 1 << 16  # of a rank within a window, beyond which its reads go out as they are
HELD_BYTES = 1 << 20  # held at most: beyond, the oldest groups go out early


@dataclass
class _Group:
    seq: int
    text: bytes  # the line, without its newline
    due: float
    ranks: list[bytes] = field(default_factory=list)  # the ranks' labels, in arrival order


class CollapsingConsole(Console):
    """marun's stdout for a node showing several ranks, `[<node>:<label>] ` prefixed."""

    def __init__(
        self,
        window: float = DEFAULT_WINDOW,
        fd: int = 1,
        clock: Callable[[], float] = time.monotonic,
        timer: bool = True,
    ) -> None:
        """`clock` and `timer` for tests: a clock of their own, and no writer thread (they
        call `write_due`)."""
        super().__init__(fd)
        self._window = window
        self._clock = clock
        self._groups: deque[_Group] = deque()
        self._by_text: dict[bytes, list[_Group]] = {}
        self._latest: dict[bytes, int] = {}  # label -> seq of its newest group
        self._labels: dict[bytes, bytes] = {}  # prefix `[0:3] ` -> label `3`
        self._node = b"0"
        self._seq = 0
        self._held = 0
        self._waker = _thread.allocate_lock()  # released: the writer has something to look at
        self._waker.acquire()
        self._writer = not timer  # started (or not to be)
        self._streams = 0  # streams begun and not ended
        # prefix -> [start of its current window, its bytes in it, flooding (0 or 1)]: each
        # touched by its own pump thread only (a restarted process's stream follows the one
        # that ended)
        self._rates: dict[bytes, list[float]] = {}

    def show(self, prefix: bytes, pending: Bytes, data: bytes, end: int) -> None:
        if not prefix or self._flooding(prefix, end + 1):
            if self._groups:  # this rank's held lines first (it added them: it sees them)
                with self._lock:
                    self._out(len(self._groups))
            super().show(prefix, pending, data, end)
            return
        lines = (bytes(pending) + data[:end]).split(b"\n")
        self._take(prefix, lines)

    def _flooding(self, prefix: bytes, size: int) -> bool:
        """Whether the rank of `prefix` floods: more than FLOOD_BYTES in its current window,
        or in the whole window before it (once flooding, a window of less ends it)."""
        now = self._clock()
        rate = self._rates.get(prefix)
        if rate is None:
            rate = self._rates[prefix] = [now, 0.0, 0.0]
        elif now - rate[0] >= self._window:
            calm = rate[1] <= FLOOD_BYTES or now - rate[0] >= 2 * self._window
            rate[0], rate[1], rate[2] = now, 0.0, 0.0 if calm else 1.0
        rate[1] += size
        if rate[1] > FLOOD_BYTES:
            rate[2] = 1.0
        return rate[2] > 0

    def show_line(self, prefix: bytes, line: bytes) -> None:
        if not prefix:
            super().show_line(prefix, line)
            return
        self._take(prefix, [line])

    def stream_began(self) -> None:
        with self._lock:
            self._streams += 1

    def stream_ended(self) -> None:
        """The last stream's end writes out everything held: marun may end next."""
        with self._lock:
            self._streams -= 1
            if self._streams <= 0:
                self._out(len(self._groups))

    def flush(self) -> None:
        """Everything held, out now."""
        with self._lock:
            self._out(len(self._groups))

    def _take(self, prefix: bytes, lines: list[bytes]) -> None:
        label = self._labels.get(prefix)
        if label is None:
            self._node, _, label = prefix[1:-2].partition(b":")
            self._labels[prefix] = label
        due = self._clock() + self._window
        with self._lock:
            was_empty = not self._groups
            for text in lines:
                self._add(label, text, due)
            if self._held > HELD_BYTES:
                self._out(len(self._groups) // 2 or 1)
            start = not self._writer
            self._writer = True
        if start:  # a bare thread, as the pumps
            _thread.start_new_thread(self._write_due, ())
        elif was_empty:
            self._wake()  # it waits for a first group

    def _add(self, label: bytes, text: bytes, due: float) -> None:
        after = self._latest.get(label, -1)
        for group in self._by_text.get(text, ()):
            if group.seq > after and label not in group.ranks:
                group.ranks.append(label)
                self._latest[label] = group.seq
                return
        group = _Group(self._seq, text, due, [label])
        self._seq += 1
        self._groups.append(group)
        self._by_text.setdefault(text, []).append(group)
        self._latest[label] = group.seq
        self._held += len(text) + 16

    def _out(self, count: int) -> None:
        """The first `count` groups to the console, in one write (the lock held)."""
        if not count:
            return
        parts: list[bytes] = []
        for _ in range(count):
            group = self._groups.popleft()
            same = self._by_text[group.text]
            same.remove(group)
            if not same:
                del self._by_text[group.text]
            self._held -= len(group.text) + 16
            parts.append(self._prefix_of(group.ranks) + group.text + b"\n")
        self._write_locked([b"".join(parts)])  # one buffer: writev takes IOV_MAX parts at most

    def _prefix_of(self, labels: list[bytes]) -> bytes:
        return b"[" + self._node + b":" + ranks_label(labels) + b"] "

    def _wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # awake already
            self._waker.release()

    def write_due(self, now: float) -> float | None:
        """Write out the groups due at `now`; when the next one is due (None: none held)."""
        with self._lock:
            due = 0
            for group in self._groups:
                if group.due > now:
                    break
                due += 1
            self._out(due)
            return self._groups[0].due if self._groups else None

    def _write_due(self) -> None:
        """The writer thread: sleeps until the oldest group is due, writes out what is."""
        signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
        while True:
            now = self._clock()
            next_due = self.write_due(now)
            self._waker.acquire(timeout=-1 if next_due is None else max(0.0, next_due - now))


def ranks_label(labels: list[bytes]) -> bytes:
    """`0-3,5,scheduler`: the numbers as sorted ranges, then the names."""
    numbers = sorted(int(label) for label in labels if label.isdigit())
    names = [label.decode("utf-8", "replace") for label in labels if not label.isdigit()]
    ranges: list[list[int]] = []
    for number in numbers:
        if ranges and ranges[-1][1] == number - 1:
            ranges[-1][1] = number
        else:
            ranges.append([number, number])
    words = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges]
    return ",".join(words + names).encode()
