"""What one node 0 lets the network cost it (docs/supervision.md, "Limits"): connections in all
and per source address, how long and how much a connection may take before its hello, a file
descriptor held back for job.json, and how often a refusal is logged.

Everything here is about lines that are not the job's: the job's own marun processes hold one
connection each (per slot), say hello at once and send a few hundred bytes a second.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

HELLO_WAIT = 5.0  # seconds a connection may stay open without a hello
OUTPUT_LIMIT = 4 << 20  # bytes waiting for one member to read (a stop with stacks is < 1 MiB)
SLOW_READER = 10.0  # seconds output may wait with no byte of it read: that member is dropped
ACCEPTS_PER_WAKE = 256  # connections accepted per wake-up of node 0's loop (the rest: next)
LISTEN_SLACK = 64  # the listen backlog beyond the job's marun processes (strangers, reconnects)
REFUSAL_WINDOW = 10.0  # refusals are counted per source over this many seconds
REFUSALS_LOGGED = 3  # ... of which this many are logged one by one, the rest in a summary
REFUSAL_LINES = 10  # ... and this many of all sources together (a flood from many addresses)
_KEPT = 256  # reasons and sources a window's summary keeps apart


def per_source_limit(expected: int) -> int:
    """Connections from one address: every marun of the job may run on one machine (simulate),
    and each may have a reconnect overlapping its old connection."""
    return 2 * expected + 8


def total_limit(expected: int) -> int:
    return 4 * expected + 64


def listen_backlog(expected: int) -> int:
    """Connections the kernel holds for node 0 before it accepts them: every marun of the job
    may connect in the same second (8,192 at the platform's largest), and one the kernel does
    not hold waits for a SYN retry (1 s, then 2 s...). The kernel caps it at somaxconn."""
    return min(expected + LISTEN_SLACK, _somaxconn())


def _somaxconn() -> int:
    try:
        with open("/proc/sys/net/core/somaxconn") as fh:
            return max(LISTEN_SLACK, int(fh.read().strip()))
    except (OSError, ValueError):
        return 4096  # Linux's default since 5.4


class Reserve:
    """One file descriptor held back (on /dev/null): when the process runs out (EMFILE), giving
    it up lets node 0 accept-and-close the connection that is waiting (else the listening
    socket stays readable and the loop spins) and write job.json."""

    def __init__(self) -> None:
        self._fd: int | None = None
        # Held around every accept and while the reserve is out: a descriptor freed for job.json
        # must not be taken by an accept in the coordinator's thread meanwhile.
        self.lock = threading.RLock()
        self.take()

    def take(self) -> None:
        if self._fd is None:
            with contextlib.suppress(OSError):
                self._fd = os.open(os.devnull, os.O_RDONLY)

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        with self.lock:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)
            try:
                yield None
            finally:
                self.take()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


class RefusalLog:
    """Every refusal counted; in each REFUSAL_WINDOW, the first REFUSALS_LOGGED of a source and
    the first REFUSAL_LINES of all sources together are logged one by one, the rest in one
    summary line when the window closes (how many, from how many sources, the top reasons and
    sources). A loop of garbage, or a flood of connections from many addresses, costs node 0's
    console a few lines per 10 s, not one per connection."""

    def __init__(self, log: Callable[..., None]) -> None:
        self._log = log
        self.total = 0
        self._started: float | None = None  # the window's start (monotonic); None: none open
        self._lines = 0  # logged one by one in this window
        self._logged: dict[str, int] = {}  # ... per source
        self._reasons: dict[str, int] = {}  # the rest, by reason and by source
        self._sources: dict[str, int] = {}

    def refuse(self, source: str, why: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.total += 1
        if self._started is None or now - self._started >= REFUSAL_WINDOW:
            self._summarise()
            self._started = now
        mine = self._logged.get(source, 0)
        if mine < REFUSALS_LOGGED and self._lines < REFUSAL_LINES:
            self._logged[source] = mine + 1
            self._lines += 1
            self._log("job_message_refused", "warning", source=source, reason=why)
            return
        _count(self._reasons, why[:200])
        _count(self._sources, source)

    def flush(self, now: float | None = None) -> None:
        """Summarise the window once it is over (called from the loop's tick)."""
        now = time.monotonic() if now is None else now
        if self._started is not None and now - self._started >= REFUSAL_WINDOW:
            self._summarise()
            self._started = None

    def _summarise(self) -> None:
        reasons, sources = self._reasons, self._sources
        self._reasons, self._sources, self._logged, self._lines = {}, {}, {}, 0
        if not reasons:
            return
        top = sorted(reasons.items(), key=lambda item: -item[1])[:3]
        most = sorted(sources.items(), key=lambda item: -item[1])[:3]
        self._log(
            "job_messages_refused",
            "warning",
            source=most[0][0] if len(sources) == 1 else f"{len(sources)} sources",
            count=sum(reasons.values()),
            seconds=REFUSAL_WINDOW,
            reasons="; ".join(f"{n} x {why}" for why, n in top),
            sources=", ".join(f"{src} ({n})" for src, n in most),
        )


def _count(counts: dict[str, int], key: str) -> None:
    """One more of `key`; at most _KEPT keys (a flood of new sources or reasons is counted as
    one `other`), so a window's books stay bounded."""
    if key not in counts and len(counts) >= _KEPT:
        key = "other"
    counts[key] = counts.get(key, 0) + 1
