"""marun.runtime.early_signals' record after the supervisor's loop: a stop signal that comes
while nothing else listens (between the loop's end and the wait for the job's end) is found by
`since(mark)` and acted on by that wait (marun.runtime.node_report)."""

from __future__ import annotations

import signal

from marun.runtime import early_signals


def test_a_signal_recorded_after_the_mark_is_found_and_one_before_is_not() -> None:
    saved = list(early_signals._received)
    raising = early_signals._raising[0]
    try:
        early_signals._received.clear()
        early_signals._raising[0] = False  # as after hold(): recorded, not raised
        early_signals._record(signal.SIGINT, None)  # before the loop (the loop acts on it)
        mark = early_signals.count()
        assert early_signals.since(mark) is None
        early_signals._record(signal.SIGTERM, None)  # after the loop: nobody else listened
        assert early_signals.first() == signal.SIGINT
        assert early_signals.since(mark) == signal.SIGTERM
        for _ in range(100):  # a flood is bounded
            early_signals._record(signal.SIGTERM, None)
        assert early_signals.count() == 64
    finally:
        early_signals._received[:] = saved
        early_signals._raising[0] = raising
