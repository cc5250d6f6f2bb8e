"""Each process's output: to its log file as it comes, and to marun's stdout as whole lines
prefixed `[<node>:<rank or name>] `.

One loop in one thread reads every pipe and is the only writer of marun's stdout, writing whole
lines only; so lines of different ranks interleave at line boundaries and never inside a line.
A line longer than `MAX_LINE` (a progress bar redrawn with `\\r` for hours) is cut there so memory
stays bounded; the log file always receives the bytes exactly as written.

Bytes move in blocks, never line by line in Python: each read goes to the log file as it is; its
whole lines go to the console in one write, prefixed by one `bytes.replace` (none at all for a
process not shown); only the last `TAIL_LINES` lines of a block are split off for the tail.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable

from marun._files import private_dir, write_all
from marun.errors import bad_value

MAX_LINE = 1 << 20
PIPE_SIZE = 1 << 20
TAIL_LINES = 20  # kept per process for the failure summary
_TAIL_WIDTH = 2000  # characters of each kept line


# -- files and directories marun creates --------------------------------------------------


def open_log(path: str) -> int:
    """Open (truncate) a process's log file, mode 0600, in its private directory. Never through
    a symbolic link: one planted where a log goes would have marun (often root) truncate and
    fill, and chmod, whatever it points at."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        private_dir(os.path.dirname(path) or ".", strict=False)
        fd = os.open(path, flags, 0o600)
        os.fchmod(fd, 0o600)
    except OSError as exc:
        raise bad_value("log file", path, f"a path marun can write ({exc.strerror})") from None
    return fd


# -- the console ----------------------------------------------------------------------------


class Console:
    """marun's stdout. A reader that has gone away (a closed pipe) silences the console for the
    rest of the run; the log files keep everything."""

    def __init__(self, fd: int = 1) -> None:
        self._fd = fd
        self._open = True

    def write_block(self, prefix: bytes, block: bytes) -> None:
        """Whole lines joined by newlines (the last one's newline left off), each prefixed."""
        if not self._open:
            return
        # One copy (the replace); writev joins the pieces in the kernel.
        body = block.replace(b"\n", b"\n" + prefix) if prefix else block
        parts = [prefix, body, b"\n"] if prefix else [body, b"\n"]
        try:
            written = os.writev(self._fd, parts)
            if written < sum(len(p) for p in parts):
                write_all(self._fd, b"".join(parts)[written:])
        except OSError:
            self._open = False


class OutputStream:
    """One pipe of one process: every byte to its log file, whole lines to the console (when
    selected) and to the tail kept for the failure summary."""

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
        self._pending = bytearray()
        self._on_log_error = on_log_error
        self._log_ok = True

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
        end = data.rfind(b"\n")
        if end < 0:
            self._pending += data
        else:
            # The whole lines of this read (the first one may have begun in an earlier read).
            if self._pending:
                self._pending += data[:end]
                block = bytes(self._pending)
                self._pending.clear()
            else:
                block = data[:end]
            self._pending += data[end + 1 :]
            self._emit(block)
        while len(self._pending) >= MAX_LINE:
            self._emit(bytes(self._pending[:MAX_LINE]))
            del self._pending[:MAX_LINE]

    def close(self) -> None:
        """At end of output: a last line without its newline is shown too."""
        if self._pending:
            self._emit(bytes(self._pending))
            self._pending.clear()

    def _emit(self, block: bytes) -> None:
        """Whole lines, joined by newlines, to the console and the tail."""
        if self._console is not None:
            self._console.write_block(self._prefix, block)
        keep = self._tail.maxlen
        if keep == 0:
            return
        lines = block.rsplit(b"\n", keep) if keep else block.split(b"\n")
        for line in lines[-keep:] if keep else lines:
            self._tail.append(line[:_TAIL_WIDTH].decode("utf-8", "replace").rstrip("\r"))


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


def new_tail() -> deque[str]:
    return deque(maxlen=TAIL_LINES)
