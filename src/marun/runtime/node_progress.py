"""This node's ranks' progress, read from the output marun already has (docs/supervision.md,
"Progress"): the relay hands each shown stream's latest blocks over by reference (one deque
append per read, nothing parsed in the pump), and a process not shown writes its log itself
(marun.runtime.direct_log), whose end is read back. Only when the node reports (`report`, from
the heartbeat) is the end of each rank's latest output looked at, by marun.progress: the
parsing costs per report and rank, not per line.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from marun.plan.launch_plan import ProcessSpec
    from marun.progress.tracker import NodeReport, Tracker

RECENT_BLOCKS = 8  # a stream's latest reads kept (by reference) until the next report
LOOK_BYTES = 4096  # of a rank's latest output looked at (marun.progress.recognise's too)


class NodeProgress:
    """The ranks of one node (`processes`, those with a rank), prefixed `[<node>:<rank>] ` on
    the console. `stream` from the supervisor's thread as a stream is made; the pumps append
    to what it returns; `report` from one thread (the heartbeat's)."""

    def __init__(
        self, node: int, processes: Sequence[ProcessSpec], pattern: str | None = None
    ) -> None:
        self._pattern = pattern
        self._tracker: Tracker | None = None  # made at the first report: nothing loaded before
        self._rank_of = {
            f"[{node}:{p.rank}] ".encode(): p.rank for p in processes if p.rank is not None
        }
        self._logs = {p.rank: p.log for p in processes if p.rank is not None}
        self._streams: dict[int, deque[bytes]] = {}
        self._seen: dict[int, object] = {}  # rank -> its newest block (or log size) looked at
        self._lock = threading.Lock()

    def stream(self, prefix: bytes) -> deque[bytes] | None:
        """Where the stream prefixed `prefix` (one attempt of a rank) leaves its reads, or None
        for a process without a rank."""
        rank = self._rank_of.get(prefix)
        if rank is None:
            return None
        recent: deque[bytes] = deque(maxlen=RECENT_BLOCKS)
        with self._lock:
            self._streams[rank] = recent
        return recent

    def report(self, now: float) -> NodeReport | None:
        """Every rank's latest output looked at, and the node's report (None: no progress)."""
        if self._tracker is None:
            from marun.progress.recognise import Recogniser
            from marun.progress.tracker import Tracker

            self._tracker = Tracker(Recogniser(self._pattern))
        with self._lock:
            streams = dict(self._streams)
        for rank, log in self._logs.items():
            recent = streams.get(rank)
            if recent is not None:
                self._look(rank, recent.copy(), now)  # deque.copy: atomic under the GIL
            else:
                self._look_log(rank, log, now)
        return self._tracker.report(now)

    def _look(self, rank: int, recent: deque[bytes], now: float) -> None:
        assert self._tracker is not None
        if not recent or self._seen.get(rank) is recent[-1]:
            return
        self._seen[rank] = recent[-1]
        parts: list[bytes] = []
        size = 0
        while recent and size < LOOK_BYTES:
            parts.append(recent.pop())
            size += len(parts[-1])
        self._tracker.feed(rank, b"".join(reversed(parts)), now)

    def _look_log(self, rank: int, path: str, now: float) -> None:
        """The end of a log the process writes itself, when it has grown."""
        assert self._tracker is not None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            size = os.fstat(fd).st_size
            if size == 0 or self._seen.get(rank) == size:
                return
            self._seen[rank] = size
            data = os.pread(fd, LOOK_BYTES, max(0, size - LOOK_BYTES))
        except OSError:
            return
        finally:
            os.close(fd)
        self._tracker.feed(rank, data, now)
