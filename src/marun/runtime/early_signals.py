"""A stop signal that comes before the supervisor listens (while marun reads its inputs, plans,
joins the job): recorded here from the first moment of `marun run`, then acted on by the
supervisor as if it had just come (the job ends with 128+N on every node, at once), or, on the
exec path, by not starting the process at all. Without it, SIGINT then was a KeyboardInterrupt
that ended this node alone, and SIGTERM killed marun before it could tell node 0, which then
waited arrival_timeout for the node.

Only `signal` is imported: this runs on the path to `exec` (bench/startup.py).
"""

from __future__ import annotations

import signal
from types import FrameType

# marun.runtime.signals.STOP, kept apart to keep this module's imports to `signal`
_STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_received: list[int] = []


def _record(signum: int, frame: FrameType | None) -> None:
    if not _received:
        _received.append(signum)


def listen() -> None:
    """Record the stop signals from now on; a signal ignored by whoever started marun (`nohup`:
    SIGHUP) stays ignored, in marun and in the process it may exec."""
    for signum in _STOP:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _record)


def first() -> int | None:
    """The first stop signal recorded, or None."""
    return _received[0] if _received else None
