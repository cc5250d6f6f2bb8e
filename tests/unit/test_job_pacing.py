"""Node 0's turns in a large job's steady state (marun.job.coordinator, PACE): paced only where
pacing gathers lines (more than PACED_FROM marun processes) and only while every member runs
(RUNNING); arrival, a round and the stop are taken as they come, and a close is never kept
waiting. What the loop asks to wait is recorded, not timed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from marun.job import coordinator as coordinator_module
from marun.job.coordinator import PACE, PACED_FROM, Coordinator
from marun.job.phases import JobPhase
from marun.plan.coordination import Coordination

SECRET = b"pacing-secret"


class Waits:
    """A stand-in for the close event: what was asked to wait, and whether a close came."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.closing = False

    def wait(self, timeout: float) -> bool:
        self.asked.append(timeout)
        return self.closing

    def is_set(self) -> bool:
        return self.closing


def _coordinator(nodes: int, slots: int) -> Iterator[tuple[Coordinator, Waits]]:
    coord = Coordination(host="127.0.0.1", port=0, nodes=nodes, index=0, job="j", slots=slots)
    made = Coordinator(coord, SECRET)  # its thread never runs: the test drives it
    waits = Waits()
    made._close_requested = waits  # type: ignore[assignment]
    yield made, waits
    made.port.server.close()
    made.port.sel.close()


@pytest.fixture
def large() -> Iterator[tuple[Coordinator, Waits]]:
    yield from _coordinator(64, 8)  # 512 marun processes


@pytest.fixture
def small() -> Iterator[tuple[Coordinator, Waits]]:
    yield from _coordinator(PACED_FROM // 8, 8)


def test_a_large_job_running_waits_out_the_rest_of_its_turn(
    large: tuple[Coordinator, Waits], monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator, waits = large
    coordinator.machine.job.phase = JobPhase.RUNNING
    monkeypatch.setattr(coordinator_module.time, "monotonic", lambda: 100.005)
    coordinator._pace(turn=100.0)  # 5 ms into its turn
    assert waits.asked == [pytest.approx(PACE - 0.005)]
    waits.asked.clear()
    coordinator._pace(turn=100.0 - PACE)  # a turn that took PACE or longer: no wait at all
    assert waits.asked == []


@pytest.mark.parametrize(
    "phase",
    [JobPhase.GATHERING, JobPhase.DUMPING, JobPhase.RESTARTING, JobPhase.STOPPING, JobPhase.DONE],
)
def test_arrival_a_round_and_the_stop_are_never_paced(
    large: tuple[Coordinator, Waits], phase: JobPhase
) -> None:
    coordinator, waits = large
    coordinator.machine.job.phase = phase
    coordinator._pace(turn=1e12)
    assert waits.asked == []


def test_a_small_job_is_never_paced(small: tuple[Coordinator, Waits]) -> None:
    coordinator, waits = small
    assert coordinator.expected == PACED_FROM
    coordinator.machine.job.phase = JobPhase.RUNNING
    coordinator._pace(turn=1e12)
    assert waits.asked == []
