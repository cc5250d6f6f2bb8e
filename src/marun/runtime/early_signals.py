"""A stop signal that comes before the supervisor listens, from the first moment of `marun run`.

- While marun reads its inputs and plans (it may wait there: for a peer's name to resolve, for
  a rank table), a stop signal ends it at once, nothing started and nothing said (exit 128+N,
  as a ^C ended it before): the handler raises `EarlyStop`, which `launch.run_node` turns into
  the exit code. Nobody else can be told: this node has not joined the job yet.
- From `hold()` on (the plan is made; the node joins the job), the signal is recorded instead,
  and the supervisor acts on it as if it had just come: nothing starts, and the job hears of it
  at once (every node ends with 128+N). On the exec path nothing is exec'd. Before, SIGINT then
  was a KeyboardInterrupt that ended this node alone, SIGTERM killed marun before it could tell
  node 0, and the others waited arrival_timeout for it.

Only `signal` is imported: this runs on the path to `exec` (bench/startup.py).
"""

from __future__ import annotations

import signal
from types import FrameType

# marun.runtime.signals.STOP, kept apart to keep this module's imports to `signal`
_STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_received: list[int] = []
_raising = [True]


class EarlyStop(BaseException):
    """A stop signal while marun planned (a BaseException, as KeyboardInterrupt is: no
    `except Exception` of the readers may take it for bad input)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _record(signum: int, frame: FrameType | None) -> None:
    if len(_received) < 64:  # (bounded: a flood of signals is one fact)
        _received.append(signum)
    if _raising[0]:
        raise EarlyStop(signum)


def listen() -> None:
    """Catch the stop signals from now on; a signal ignored by whoever started marun (`nohup`:
    SIGHUP) stays ignored, in marun and in the process it may exec."""
    for signum in _STOP:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _record)


def hold() -> None:
    """From now on a stop signal is recorded for the supervisor, not raised."""
    _raising[0] = False


def first() -> int | None:
    """The first stop signal recorded, or None."""
    return _received[0] if _received else None


def count() -> int:
    """How many stop signals were recorded so far (a mark for `since`)."""
    return len(_received)


def since(mark: int) -> int | None:
    """The first stop signal recorded after `mark` (`count()` then), or None: one that came while
    nothing else listened (between the supervisor's loop and its wait for the job's end)."""
    return _received[mark] if len(_received) > mark else None
