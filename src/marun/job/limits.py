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
from dataclasses import dataclass, field

HELLO_WAIT = 5.0  # seconds a connection may stay open without a hello
OUTPUT_LIMIT = 4 << 20  # bytes waiting for one member to read (a stop with stacks is < 1 MiB)
SLOW_READER = 10.0  # seconds output may wait with no byte of it read: that member is dropped
ACCEPTS_PER_WAKE = 256  # connections accepted per wake-up of node 0's loop (the rest: next)
LISTEN_SLACK = 64  # the listen backlog beyond the job's marun processes (strangers, reconnects)
REFUSAL_WINDOW = 10.0  # refusals are counted per source over this many seconds
REFUSALS_LOGGED = 3  # ... of which this many are logged one by one, the rest in a summary


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


@dataclass
class _Window:
    started: float
    count: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class RefusalLog:
    """Every refusal counted; per source, the first REFUSALS_LOGGED of each REFUSAL_WINDOW are
    logged one by one and the rest in one summary line when the window closes, so a loop of
    garbage costs a line per 10 s, not one per line."""

    def __init__(self, log: Callable[..., None]) -> None:
        self._log = log
        self._windows: dict[str, _Window] = {}
        self.total = 0

    def refuse(self, source: str, why: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.total += 1
        window = self._windows.get(source)
        if window is None or now - window.started >= REFUSAL_WINDOW:
            self._summarise(source)
            window = self._windows[source] = _Window(now)
        window.count += 1
        if window.count <= REFUSALS_LOGGED:
            self._log("job_message_refused", "warning", source=source, reason=why)
        else:
            window.reasons[why] = window.reasons.get(why, 0) + 1

    def flush(self, now: float | None = None) -> None:
        """Summarise the windows that are over (called from the loop's tick)."""
        now = time.monotonic() if now is None else now
        for source, window in list(self._windows.items()):
            if now - window.started >= REFUSAL_WINDOW:
                self._summarise(source)

    def _summarise(self, source: str) -> None:
        window = self._windows.pop(source, None)
        if window is None or not window.reasons:
            return
        more = sum(window.reasons.values())
        top = sorted(window.reasons.items(), key=lambda item: -item[1])[:3]
        self._log(
            "job_messages_refused",
            "warning",
            source=source,
            count=more,
            seconds=REFUSAL_WINDOW,
            reasons="; ".join(f"{n} x {why}" for why, n in top),
        )
