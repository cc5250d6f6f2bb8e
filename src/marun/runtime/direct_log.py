"""The output of a process not shown on the console: its log file is its stdout and stderr.

Nothing of marun is in its data path (no pipe, no pump thread, no copy): the process writes its
log as it would write any file, so `--console-ranks 0` on a node of 64 ranks costs the other 63
nothing. The descriptor is the one marun opened once for the whole run (O_APPEND, mode 0600,
runtime/output.py `open_log`): every attempt, restart or restart round appends to it, and so do
the hang watchdog's stack dumps. What the pump did besides writing the log comes from the file:

- the failure summary's last lines: read back from the end of the log (at most `TAIL_READ`
  bytes), only what was written since the failed attempt started (`begin` remembers the log's
  size then), split and cut as the pump's tail is (output.tail_line);
- the hang watchdog's input (a rank's last line, `JobLink.activity`): the growth of the logs,
  one fstat per log every `GROWTH_CHECK` seconds (at most an eighth of hang_timeout) in a
  thread of its own (`watch`). It runs only where the figure is read: a multi-node job with
  the hang watchdog on (the heartbeat's `idle` is read by nothing else) and a process not
  shown; anywhere else nothing polls at all. The supervisor's loop would check twice as often
  (its tick is 0.5 s, and more on every signal) whether or not the watchdog is on, and inside
  the member's heartbeat it would tie the job's coordination to the runtime's logs.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
from collections.abc import Callable, Sequence

from marun.runtime.output import MAIN_THREAD_SIGNALS, TAIL_LINES, tail_line

TAIL_READ = 1 << 16  # bytes read back from a log's end for its last lines
GROWTH_CHECK = 1.0  # seconds between two looks at the logs' sizes (a small job's heartbeat)


class DirectLogs:
    """The logs of a node's processes written directly by them. `begin` from the supervisor's
    loop; `grew` from the watcher thread (`watch`); `close` before the descriptors close."""

    def __init__(self, fds: Sequence[int], paths: Sequence[str]) -> None:
        self._fds = list(fds)
        self._paths = list(paths)
        self._begun: dict[int, int] = {}  # process index -> its log's size at its latest start
        self._seen: dict[int, int] = {}  # process index -> its log's size at the last `grew`
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._activity: Callable[[], None] | None = None
        self._every = GROWTH_CHECK
        self._watching = False

    def watch(self, activity: Callable[[], None], hang_timeout: float) -> None:
        """Call `activity()` whenever a log has grown, looking every `GROWTH_CHECK` seconds (an
        eighth of `hang_timeout` if less), from the first process started on."""
        self._activity = activity
        self._every = min(GROWTH_CHECK, max(0.05, hang_timeout / 8))

    def begin(self, index: int) -> int:
        """Process `index` starts an attempt: the descriptor to give it as stdout and stderr."""
        fd = self._fds[index]
        size = _size(fd)
        with self._lock:
            self._begun[index] = size
            self._seen.setdefault(index, size)
            start = self._activity is not None and not self._watching and not self._closed
            self._watching = self._watching or start
        if start:  # a bare thread, as the pumps: Thread.start() would wait until it runs
            _thread.start_new_thread(self._watch, ())
        return fd

    def grew(self) -> bool:
        """Whether any of these logs changed size since the last call: a line was written."""
        with self._lock:
            if self._closed:
                return False
            grown = False
            for index in self._begun:
                size = _size(self._fds[index])
                if size != self._seen[index]:  # smaller too: a process truncated its log
                    self._seen[index] = size
                    grown = True
            return grown

    def read_tail(self, index: int) -> list[str] | None:
        """The last lines of process `index`'s latest attempt (as many as `TAIL_LINES`), or
        None when it does not write its log directly (its pump keeps its tail)."""
        start = self._begun.get(index)
        if start is None:
            return None
        return read_log_tail(self._paths[index], self._fds[index], start)

    def close(self) -> None:
        """Before the descriptors close: `grew` looks at them no more, the watcher ends."""
        with self._lock:
            self._closed = True
        self._stop.set()

    def _watch(self) -> None:
        # Signals are the main thread's (marun.runtime.signals), as in the relay's pumps.
        signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
        activity = self._activity
        assert activity is not None
        while not self._stop.wait(self._every):
            if self.grew():
                activity()


def read_log_tail(path: str, fd: int, start: int, keep: int | None = None) -> list[str]:
    """The last `keep` lines (default: the pump's TAIL_LINES) written to the log open as `fd`
    (write-only) since offset `start`. The file is opened again by `path` to be read, never
    through a link, and only if it is still the same file as `fd` (else: no lines)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        reader = os.open(path, flags)
    except OSError:
        return []
    try:
        mine, log = os.fstat(reader), os.fstat(fd)
        if (mine.st_dev, mine.st_ino) != (log.st_dev, log.st_ino):
            return []
        size = log.st_size
        begin = max(start, size - TAIL_READ)
        # One byte more in front of a window that starts inside the attempt's output: whether
        # the window's first line is whole.
        first = begin - 1 if begin > start else begin
        data = os.pread(reader, max(0, size - first), first) if size > first else b""
    except OSError:
        return []
    finally:
        os.close(reader)
    return tail_of(data, cut=first < begin, keep=TAIL_LINES if keep is None else keep)


def tail_of(data: bytes, cut: bool, keep: int) -> list[str]:
    """The last `keep` lines of `data` as the pump keeps them (a last line without a newline
    counts). `cut`: data[0] is the byte before the window; the window's first line is left out
    unless it starts there, but a window inside one line (longer than TAIL_READ) is kept."""
    if cut:
        newline = data.find(b"\n")
        data = data[newline + 1 :] if 0 <= newline < len(data) - 1 else data[1:]
    if not data or keep <= 0:
        return []
    if data.endswith(b"\n"):
        data = data[:-1]
    return [tail_line(line) for line in data.rsplit(b"\n", keep)[-keep:]]


def _size(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return 0
