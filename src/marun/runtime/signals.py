"""The signals marun relays, and a wake-up pipe that turns them into events of the main loop.

Python runs a signal handler between two bytecodes of the main thread, wherever that thread is;
acting there races with the loop's own bookkeeping. So the handlers do nothing, and
`signal.set_wakeup_fd` makes the interpreter write each signal's number into a pipe the loop
watches with the children's output: a signal is then handled at one well-defined point, after
whatever the loop was doing.
"""

from __future__ import annotations

import os
import signal
from types import FrameType, TracebackType
from typing import Any, Callable, Union

# Relayed to every child's process group. The first four also stop the job (grace, then
# SIGKILL), as torchrun does; SIGUSR1/SIGUSR2 are only passed on (checkpoint-now conventions).
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
RELAYED = (*STOPPING, signal.SIGUSR1, signal.SIGUSR2)

_Handler = Union[Callable[[int, Union[FrameType, None]], Any], int, signal.Handlers, None]


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Installed only so that the interpreter reports the signal through the wake-up fd (and,
    as PID 1, so that the kernel delivers it at all: PID 1 gets no default actions)."""


class SignalPipe:
    """While open: RELAYED signals and SIGCHLD are caught and their numbers queued in a
    non-blocking pipe; `fileno()` is that pipe's read end, `drain()` returns the numbers."""

    def __init__(self) -> None:
        self._read = -1
        self._write = -1
        self._old_fd = -1
        self._old_handlers: dict[int, _Handler] = {}

    def __enter__(self) -> SignalPipe:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        # A full pipe only means the loop is already due to wake: losing a byte of SIGCHLD is
        # harmless because every wake-up reaps everything there is.
        self._old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for signum in (*RELAYED, signal.SIGCHLD):
            self._old_handlers[signum] = signal.signal(signum, _ignore)
        return self

    def fileno(self) -> int:
        return self._read

    def drain(self) -> list[int]:
        numbers: list[int] = []
        while True:
            try:
                data = os.read(self._read, 512)
            except BlockingIOError:
                return numbers
            if not data:
                return numbers
            numbers.extend(data)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._read)
        os.close(self._write)
