"""Signals, in one place: which ones stop a job, how a signal becomes an exit code, and how
marun's processes (the supervisor, MPI's leader) catch them.

- `STOP`: the signals that stop a job (grace, then SIGKILL), as torchrun's; `PASS_ON`
  (SIGUSR1/SIGUSR2, checkpoint-now conventions) are only passed on. `RELAYED` is both.
- How a signal becomes an exit code (128+N) is `marun.exit_codes.signal_exit`'s, with the job's
  other exit codes.
- `install(signums, handler)` is the only place a handler is set; it returns what it replaced,
  for `restore`. A stop signal ignored by whoever started marun stays ignored (`heeded`).
- Three ways to hear a signal, all through `install`: `SignalPipe` for the supervisor's select
  loop, `StopFlag` for the MPI leader's threads and poll loops, and `interruptible()` for one
  blocking wait of the main thread (the supervisor's wait for the rest of the job at its end).

Python runs a signal handler between two bytecodes of the main thread, wherever that thread is;
acting there races with the loop's own bookkeeping. So the handlers only record: the pipe gets
the signal's number through `signal.set_wakeup_fd`, the flag an attribute and an event; each loop
acts at one well-defined point, after whatever it was doing. The one exception,
`interruptible`'s handler, raises, and is set only around a wait with no bookkeeping to race.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterable, Iterator, Mapping
from types import FrameType, TracebackType
from typing import Callable, Union

from marun.exit_codes import signal_exit

SIGTERM, SIGKILL = int(signal.SIGTERM), int(signal.SIGKILL)  # (for modules that send none)
STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
PASS_ON = (signal.SIGUSR1, signal.SIGUSR2)
RELAYED = (*STOP, *PASS_ON)

Handler = Callable[[int, Union[FrameType, None]], None]
_Previous = Union[Callable[[int, Union[FrameType, None]], object], int, signal.Handlers, None]


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _record_only(signum: int, frame: FrameType | None) -> None:
    """Not SIG_IGN, which would stay ignored in every child started after it (mpirun, the
    ranks); and as PID 1, a signal without a handler is not delivered at all."""


def install(signums: Iterable[int], handler: Handler) -> dict[int, _Previous]:
    """Set `handler` for each signal; returns the handlers replaced, for `restore`."""
    return {int(s): signal.signal(s, handler) for s in signums}


def heeded(signums: Iterable[int]) -> list[int]:
    """The stop signals not ignored by whoever started marun: `nohup` ignores SIGHUP, a
    non-interactive shell's `marun ... &` SIGINT and SIGQUIT. Those stay ignored all the way, as
    marun.runtime.early_signals keeps them before the supervisor: a hangup never ends a job
    started under nohup, whichever phase it comes in."""
    return [s for s in signums if signal.getsignal(s) is not signal.SIG_IGN]


def restore(previous: Mapping[int, _Previous]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


class StopFlag:
    """While installed: the first STOP signal is kept in `received` and sets `event`; PASS_ON
    signals are caught and dropped (the supervisor relays them to the whole process group, so
    the children got them already)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.event = threading.Event()
        install(heeded(STOP), self._stop)
        install(PASS_ON, _record_only)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        self.event.set()

    def exit_code(self) -> int | None:
        """128+N once signal N came, else None."""
        return None if self.received is None else signal_exit(self.received)

    def name(self) -> str:
        return "" if self.received is None else signal_name(self.received)


class SignalPipe:
    """While open: RELAYED signals and SIGCHLD are caught and their numbers queued in a
    non-blocking pipe; `fileno()` is that pipe's read end, `drain()` returns the numbers."""

    def __init__(self) -> None:
        self._read = -1
        self._write = -1
        self._old_fd = -1
        self._previous: dict[int, _Previous] = {}

    def __enter__(self) -> SignalPipe:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        # A full pipe only means the loop is already due to wake: losing a byte of SIGCHLD is
        # harmless because every wake-up reaps everything there is.
        self._old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._previous = install((*heeded(STOP), *PASS_ON, signal.SIGCHLD), _record_only)
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
        restore(self._previous)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._read)
        os.close(self._write)


class Interrupted(Exception):
    """A stop signal ended an `interruptible()` wait."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """The stop signals end a blocking wait in the main thread by raising `Interrupted` (even as
    PID 1, where a signal without a handler is ignored); the handlers before it come back."""
    previous = install(heeded(STOP), _raise_interrupted)
    try:
        yield
    finally:
        restore(previous)
