"""Python's cyclic garbage collector while node 0 takes a large job's arrival.

Arrival makes node 0's lasting state at a high rate: at 4,096 x 8, 32,768 members, their lanes
and 4,096 connections within a second or two. The collector's young generation is collected
every 700 new objects: about 300 collections, and the two full ones the heap's growth then
brings walk everything made so far: 0.1 s of node 0's arrival, and the caches it cools cost as
much again (docs/performance.md). None of that state is garbage, and little of what arrival
makes is cyclic (reference counting frees the rest), so while a large job arrives the young
generation is collected every YOUNG new objects instead; the thresholds go back as it starts (or
the coordinator closes). The thresholds are the process's: several coordinators in one process
(tests) share one raise, and the last to leave puts back what the first found.
"""

from __future__ import annotations

import gc
import threading

YOUNG = 50_000  # new objects between two collections of the young generation, while arriving


class _Raised:
    """How many coordinators are arriving, and the thresholds the first of them found."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.arriving = 0
        self.held = gc.get_threshold()


_raised = _Raised()


def arrival_begins() -> None:
    with _raised.lock:
        if _raised.arriving == 0:
            _raised.held = held = gc.get_threshold()
            gc.set_threshold(max(held[0], YOUNG), *held[1:])
        _raised.arriving += 1


def arrival_ends() -> None:
    """(once for each arrival_begins)"""
    with _raised.lock:
        if _raised.arriving == 0:
            return
        _raised.arriving -= 1
        if _raised.arriving == 0:
            gc.set_threshold(*_raised.held)
