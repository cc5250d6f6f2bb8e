"""Each shown process's output: to its log file as it comes, and to marun's stdout as whole
lines prefixed `[<node>:<rank or name>] `. (A process the console does not show has no pipe: it
writes its log file itself, marun.runtime.direct_log.)

Every pipe has its own pump thread (`Pump`, all of a node's held by its `Relay`), so reading,
logging and showing use every core: the system calls (read, write, writev) run without the GIL,
and no rank's log waits for another rank's. The threads share only two things, each safe to
share: marun's stdout (`Console`), written under a lock one whole-line block at a time, so lines
of different ranks interleave at line boundaries and never inside a line; and a process's tail
(a bounded deque, whose appends are atomic), read by the supervisor for the failure report.
Everything else a pump touches is its own: its pipe, its `OutputStream`, and its process's log
file (O_APPEND: the hang watchdog's stack dumps, written by marun.runtime.stacks' own thread,
land between two of its writes).
A line longer than `MAX_LINE` (a progress bar redrawn with `\\r` for hours) is cut there so
memory stays bounded; the log file always receives the bytes exactly as written.

Bytes move in blocks, never line by line in Python: each read goes to the log file as it is; its
whole lines go to the console in one `writev`, prefixed by one `bytes.replace` (none at all for a
process not shown); only the last `TAIL_LINES` lines of a block are split off for the tail.
"""

from __future__ import annotations

import _thread
import os
import select
import signal
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Union

from marun._files import private_dir, write_all
from marun.errors import bad_value
from marun.runtime.signals import RELAYED

if TYPE_CHECKING:
    from marun.runtime.node_progress import NodeProgress

MAX_LINE = 1 << 20
PIPE_SIZE = 1 << 20
READ_SIZE = 1 << 18  # per read: the most one block costs in memory and on the console lock
TAIL_LINES = 20  # kept per process for the failure summary
_TAIL_WIDTH = 2000  # characters of each kept line

Bytes = Union[bytes, bytearray, memoryview]


# -- files and directories marun creates --------------------------------------------------


def open_log(path: str) -> int:
    """Open (truncate) a process's log file, mode 0600, in its private directory. Never through
    a symbolic link: one planted where a log goes would have marun (often root) truncate and
    fill, and chmod, whatever it points at."""
    # Read too: end_the_line looks at the last byte.
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        private_dir(os.path.dirname(path) or ".", strict=False)
        fd = os.open(path, flags, 0o600)
        os.fchmod(fd, 0o600)
    except OSError as exc:
        raise bad_value("log file", path, f"a path marun can write ({exc.strerror})") from None
    return fd


def end_the_line(fd: int) -> None:
    """A log whose last byte is not a newline (its process was killed between a line's text and
    its newline: Python writes them apart) gets one, so that what comes next (the process's next
    start, a round's marker) begins a line of its own."""
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
    except OSError:
        pass  # a log that cannot be read or written: nothing to mend


# -- the console ----------------------------------------------------------------------------


class Console:
    """marun's stdout, shared by every pump thread: one `write` is one block of whole lines,
    written entirely before any other block starts. A reader that has gone away (a closed pipe)
    silences the console for the rest of the run; the log files keep everything."""

    def __init__(self, fd: int = 1) -> None:
        self._fd = fd
        self._open = True
        self._lock = threading.Lock()
        # The node's progress (marun.runtime.node_progress): each stream shown hands it its
        # latest blocks; None: nobody reads progress.
        self.progress: NodeProgress | None = None

    def write(self, parts: Sequence[Bytes]) -> None:
        """`parts` joined are whole lines, each ending with a newline; writev joins them in the
        kernel, under the lock (the rest of a short write too)."""
        if not self._open:
            return
        with self._lock:
            self._write_locked(parts)

    def _write_locked(self, parts: Sequence[Bytes]) -> None:
        if not self._open:
            return
        try:
            written = os.writev(self._fd, parts)
            if written < sum(len(p) for p in parts):
                write_all(self._fd, b"".join(parts)[written:])
        except OSError:
            self._open = False

    def show(self, prefix: bytes, pending: Bytes, data: bytes, end: int) -> None:
        """`pending` and data[:end+1] (whole lines) of the stream whose prefix is `prefix`,
        each line prefixed: the replace runs over the whole read (no slice copied first) and
        the write stops at its last newline. (marun.runtime.collapse: the collapsing one.)"""
        if prefix:
            body = data.replace(b"\n", b"\n" + prefix)
            cut = len(body) - (len(data) - end - 1) - len(prefix)  # just past the last newline
        else:
            body, cut = data, end + 1
        lines = memoryview(body)[:cut]
        if pending:
            self.write([prefix, pending, lines] if prefix else [pending, lines])
        else:
            self.write([prefix, lines] if prefix else [lines])

    def show_line(self, prefix: bytes, line: bytes) -> None:
        """One line without its newline (a stream's last, or a piece of an over-long one)."""
        self.write([prefix, line, b"\n"])

    def stream_began(self) -> None:
        """A stream that shows its lines here was made (the collapsing console counts them)."""

    def stream_ended(self) -> None:
        """A stream ended (the collapsing console: the last one writes out what it holds)."""


class OutputStream:
    """One pipe of one process: every byte to its log file, whole lines to the console (when
    selected) and to the tail kept for the failure summary. Fed by one thread at a time."""

    def __init__(
        self,
        log_fd: int,
        console: Console | None,
        prefix: bytes,
        tail: deque[str],
        on_log_error: Callable[[OSError], None] | None = None,
    ) -> None:
        self._log_fd = log_fd
        self._console = console
        self._prefix = prefix
        self._tail = tail
        self._pending = bytearray()  # the start of a line whose newline has not come yet
        self._on_log_error = on_log_error
        self._log_ok = True
        # The node's progress looks at each stream's latest blocks (by reference, no copy),
        # when it reports: nothing is parsed here.
        progress = console.progress if console is not None else None
        if console is not None:
            console.stream_began()
        self._recent = progress.stream(prefix) if progress is not None else None

    def feed(self, data: bytes) -> None:
        # A full disk must not stop the job (the console still shows the output), but it must
        # not go unsaid either: the first failed write is reported once, then the log rests.
        if self._log_ok:
            try:
                write_all(self._log_fd, data)
            except OSError as exc:
                self._log_ok = False
                if self._on_log_error is not None:
                    self._on_log_error(exc)
        if self._recent is not None:
            self._recent.append(data)
        end = data.rfind(b"\n")
        if end >= 0:
            # The whole lines of this read, the first one begun in `_pending` (earlier reads).
            if self._console is not None:
                self._show(data, end)
            if self._tail.maxlen != 0:
                self._keep_tail(data, end)
            self._pending.clear()
            data = data[end + 1 :]
        self._pending += data
        while len(self._pending) >= MAX_LINE:
            self._emit_line(bytes(self._pending[:MAX_LINE]))
            del self._pending[:MAX_LINE]

    def close(self) -> None:
        """At end of output: a last line without its newline is shown too."""
        if self._pending:
            self._emit_line(bytes(self._pending))
            self._pending.clear()
        if self._console is not None:
            self._console.stream_ended()

    def _show(self, data: bytes, end: int) -> None:
        assert self._console is not None
        self._console.show(self._prefix, self._pending, data, end)

    def _keep_tail(self, data: bytes, end: int) -> None:
        """The last lines of `_pending` + data[:end] into the tail: found from the end, so a
        block costs the same whatever its size."""
        keep = self._tail.maxlen
        start = end
        while keep is None or keep > 0:
            start = data.rfind(b"\n", 0, start)
            if start < 0:
                break
            keep = None if keep is None else keep - 1
        if start >= 0:
            lines = data[start + 1 : end].split(b"\n")
        else:  # fewer lines than kept: the first one begun in earlier reads
            lines = (bytes(self._pending) + data[:end]).split(b"\n")
        for line in lines:
            self._tail.append(tail_line(line))

    def _emit_line(self, line: bytes) -> None:
        """One line (the last one, or a piece of an over-long one) to the console and the tail."""
        if self._console is not None:
            self._console.show_line(self._prefix, line)
        if self._tail.maxlen != 0:
            self._tail.append(tail_line(line))


# -- the pumps --------------------------------------------------------------------------------

# Signals are the main thread's business (marun.runtime.signals): blocked in the pumps, so the
# kernel delivers them to the main thread, whose wait they end at once.
MAIN_THREAD_SIGNALS = {signal.SIGCHLD, *RELAYED}


class Pump:
    """One pipe's thread: reads it as data comes and feeds its OutputStream, until the end of
    the pipe (every writer gone) or the relay's close."""

    def __init__(
        self,
        relay: Relay,
        fd: int,
        stream: OutputStream,
        on_data: Callable[[], None] | None,
    ) -> None:
        self._relay = relay
        self._fd = fd
        self._stream = stream
        self._on_data = on_data
        self.done = threading.Event()  # set as the thread's last act: its fds are closed
        self.moved = 0  # bytes taken from the pipe so far (read by the main thread)
        # A bare thread (daemon, as all `_thread` threads are): threading.Thread.start() would
        # wait until the new thread has run, which costs the start of the next process a
        # scheduling delay (milliseconds on a busy node), once per process.
        _thread.start_new_thread(self._run, ())

    def join(self, timeout: float | None) -> bool:
        return self.done.wait(timeout)

    def _run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
        fd, stream, on_data, relay = self._fd, self._stream, self._on_data, self._relay
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(relay.closing_fd, select.POLLIN)
        left = -1  # once the relay closes: what may still be taken (at most the pipe's content)
        try:
            while True:
                if relay.closing:
                    if left < 0:
                        left = pipe_size(fd)
                    elif left == 0:
                        break
                try:
                    data = os.read(fd, READ_SIZE)
                except BlockingIOError:
                    if relay.closing:
                        break  # the pipe is empty: writers that live on are not waited for
                    poller.poll()
                    continue
                except OSError:
                    data = b""
                if not data:
                    break
                stream.feed(data)
                self.moved += len(data)
                if on_data is not None:
                    on_data()
                if left > 0:
                    left = max(0, left - len(data))
        finally:
            stream.close()
            os.close(fd)
            self.done.set()


class Relay:
    """Every output pipe of a node, each with its `Pump`. `close()` takes in what is left in
    every pipe, without waiting for writers that live on (a grandchild holding the pipe), and
    joins the threads."""

    def __init__(self) -> None:
        self.closing = False
        self.closed = False  # every pump joined, the wake-up pipe closed
        # Readable once closing: wakes every pump at once (none reads it).
        self.closing_fd, self._closing_w = os.pipe()
        self._pumps: list[Pump] = []

    def start(
        self, fd: int, stream: OutputStream, on_data: Callable[[], None] | None = None
    ) -> Pump:
        """Pump `fd` (non-blocking, the read end of a process's pipe, now the pump's to close)."""
        os.set_blocking(fd, False)
        pump = Pump(self, fd, stream, on_data)
        self._pumps.append(pump)
        return pump

    def close(self, patience: float) -> bool:
        """Drain and join every pump, however long that takes while bytes move (a slow console
        gets everything); False once none has moved a byte for `patience` seconds (a console
        nobody reads): the pumps are left, and the log files they write must stay open."""
        import time

        if self.closed:
            return True
        if not self.closing:
            self.closing = True
            os.write(self._closing_w, b"x")
        moved, since = -1, 0.0
        for pump in self._pumps:
            while not pump.join(0.1):
                now = time.monotonic()
                total = sum(p.moved for p in self._pumps)
                if total != moved:
                    moved, since = total, now
                elif now - since >= patience:
                    return False
        self.closed = True
        os.close(self.closing_fd)
        os.close(self._closing_w)
        return True


def pipe_size(fd: int) -> int:
    """How much the pipe can hold (its process may have widened it further, as root)."""
    import fcntl

    try:
        return max(PIPE_SIZE, fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032)))
    except OSError:
        return PIPE_SIZE


def widen_pipe(fd: int) -> None:
    """Make a process's output pipe as large as an unprivileged process may (Linux: 1 MiB,
    /proc/sys/fs/pipe-max-size): a rank writing in bursts goes on while the relay is busy with
    the others, and the relay takes more per wake-up."""
    import fcntl

    setpipe = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Python < 3.10 lacks the name
    for size in (PIPE_SIZE, 1 << 18):
        try:
            fcntl.fcntl(fd, setpipe, size)
            return
        except OSError:
            continue  # above the system's limit: a smaller one, else the default 64 KiB


def tail_line(line: bytes) -> str:
    """One line as the failure summary keeps it: its first characters, decoded, no `\\r`."""
    return line[:_TAIL_WIDTH].decode("utf-8", "replace").rstrip("\r")


def new_tail() -> deque[str]:
    return deque(maxlen=TAIL_LINES)
