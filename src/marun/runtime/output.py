"""Each process's output: to its log file as it comes, and to marun's stdout as whole lines
prefixed `[<node>:<rank or name>] `.

One loop in one thread reads every pipe and is the only writer of marun's stdout, writing whole
lines only; so lines of different ranks interleave at line boundaries and never inside a line.
A line longer than `MAX_LINE` (a progress bar redrawn with `\\r` for hours) is cut there so memory
stays bounded; the log file always receives the bytes exactly as written.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Sequence

from marun.errors import bad_value

MAX_LINE = 1 << 20
TAIL_LINES = 20  # kept per process for the failure summary
_TAIL_WIDTH = 2000  # characters of each kept line


# -- files and directories marun creates --------------------------------------------------


def make_private_dirs(path: str) -> None:
    """Create `path` and any missing parent with mode 0700 (logs may hold what a script printed
    about its credentials); directories that exist are left as they are."""
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)  # the umask may have taken bits off


def open_log(path: str) -> int:
    """Open (truncate) a process's log file, mode 0600, in its private directory."""
    try:
        make_private_dirs(os.path.dirname(path) or ".")
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        os.fchmod(fd, 0o600)
    except OSError as exc:
        raise bad_value("log file", path, f"a path marun can write ({exc.strerror})") from None
    return fd


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# -- the console ----------------------------------------------------------------------------


class Console:
    """marun's stdout. A reader that has gone away (a closed pipe) silences the console for the
    rest of the run; the log files keep everything."""

    def __init__(self, fd: int = 1) -> None:
        self._fd = fd
        self._open = True

    def write_lines(self, prefix: bytes, lines: Sequence[bytes]) -> None:
        if not self._open or not lines:
            return
        try:
            write_all(self._fd, b"".join(prefix + line + b"\n" for line in lines))
        except OSError:
            self._open = False


class OutputStream:
    """One pipe of one process: every byte to its log file, whole lines to the console (when
    selected) and to the tail kept for the failure summary."""

    def __init__(
        self, log_fd: int, console: Console | None, prefix: bytes, tail: deque[str]
    ) -> None:
        self._log_fd = log_fd
        self._console = console
        self._prefix = prefix
        self._tail = tail
        self._pending = bytearray()

    def feed(self, data: bytes) -> None:
        # A full disk must not stop the job; the console still shows the output.
        with contextlib.suppress(OSError):
            write_all(self._log_fd, data)
        self._pending += data
        end = self._pending.rfind(b"\n")
        lines: list[bytes] = []
        if end >= 0:
            lines = bytes(self._pending[:end]).split(b"\n")
            del self._pending[: end + 1]
        while len(self._pending) >= MAX_LINE:
            lines.append(bytes(self._pending[:MAX_LINE]))
            del self._pending[:MAX_LINE]
        self._emit(lines)

    def close(self) -> None:
        """At end of output: a last line without its newline is shown too."""
        if self._pending:
            self._emit([bytes(self._pending)])
            self._pending.clear()

    def _emit(self, lines: list[bytes]) -> None:
        if not lines:
            return
        if self._console is not None:
            self._console.write_lines(self._prefix, lines)
        for line in lines[-self._tail.maxlen :] if self._tail.maxlen else lines:
            self._tail.append(line[:_TAIL_WIDTH].decode("utf-8", "replace").rstrip("\r"))


def new_tail() -> deque[str]:
    return deque(maxlen=TAIL_LINES)
