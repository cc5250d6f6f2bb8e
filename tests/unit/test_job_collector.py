"""Python's collector while node 0 takes a large job's arrival (marun.job.collector): its young
generation collected every YOUNG new objects from the coordinator's start until the job leaves
GATHERING (or the coordinator closes), the thresholds put back after; a small job leaves them
alone; coordinators that overlap in one process share one raise."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import pytest

from marun.job import collector
from marun.job.coordinator import PACED_FROM, Coordinator
from marun.job.phases import JobPhase
from marun.plan.coordination import Coordination

SECRET = b"collector-secret"


@pytest.fixture(autouse=True)
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    assert before[0] < collector.YOUNG
    yield before
    gc.set_threshold(*before)


def test_overlapping_arrivals_share_one_raise(thresholds: tuple[int, int, int]) -> None:
    collector.arrival_begins()
    assert gc.get_threshold() == (collector.YOUNG, *thresholds[1:])
    collector.arrival_begins()
    collector.arrival_ends()
    assert gc.get_threshold()[0] == collector.YOUNG  # (one is still arriving)
    collector.arrival_ends()
    assert gc.get_threshold() == thresholds
    collector.arrival_ends()  # (one too many: nothing)
    assert gc.get_threshold() == thresholds


def _started(nodes: int, slots: int) -> Coordinator:
    coord = Coordination(host="127.0.0.1", port=0, nodes=nodes, index=0, job="j", slots=slots)
    return Coordinator(coord, SECRET, announce=lambda _: None).start()


def _until(what: object, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end and not what():  # type: ignore[operator]
        time.sleep(0.01)


def test_a_large_job_s_arrival_raises_it_until_the_job_leaves_gathering(
    thresholds: tuple[int, int, int],
) -> None:
    coordinator = _started(PACED_FROM // 8 + 1, 8)
    try:
        _until(lambda: gc.get_threshold()[0] == collector.YOUNG)
        assert gc.get_threshold() == (collector.YOUNG, *thresholds[1:])
        with coordinator._lock:  # the job stops before its start (a node left)
            coordinator.machine.job.phase = JobPhase.STOPPING
        _until(lambda: gc.get_threshold() == thresholds)
        assert gc.get_threshold() == thresholds
    finally:
        coordinator.close(linger=0.0)
    assert gc.get_threshold() == thresholds


def test_a_large_job_closed_while_gathering_puts_them_back(
    thresholds: tuple[int, int, int],
) -> None:
    coordinator = _started(PACED_FROM // 8 + 1, 8)
    _until(lambda: gc.get_threshold()[0] == collector.YOUNG)
    coordinator.close(linger=0.0)
    assert gc.get_threshold() == thresholds


def test_a_small_job_leaves_them_alone(thresholds: tuple[int, int, int]) -> None:
    coordinator = _started(PACED_FROM // 8, 8)
    try:
        first = coordinator._last_run
        _until(lambda: coordinator._last_run != first)  # (its loop has turned: a raise shows)
        assert coordinator._last_run != first
        assert gc.get_threshold() == thresholds
    finally:
        coordinator.close(linger=0.0)
