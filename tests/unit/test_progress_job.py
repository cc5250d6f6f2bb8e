"""Node 0's view of the job's progress (marun/progress/aggregate.py): a simulated job of 2 nodes
x 4 ranks printing tqdm bars, each node's report through its wire form (JSON) as a heartbeat
would carry it; job.json's `progress` section, the status line and its cadence, a straggler
named, and a job whose steps stop while its ranks still print judged hung. Time is the test's."""

from __future__ import annotations

import json

import pytest

from marun.progress.aggregate import STATUS_EVERY, Aggregator, duration
from marun.progress.tracker import NodeReport, Tracker

TOTAL = 1000


def _bar(step: int) -> bytes:
    return b"\r %d%%|#   | %d/%d [00:10<01:00, 1.00it/s]" % (step * 100 // TOTAL, step, TOTAL)


class Job:
    """2 nodes x 4 ranks (ranks 0-3 on node 0, 4-7 on node 1), each rank at `rates[rank]`
    steps a second; every `beat` seconds each node reports to node 0."""

    def __init__(self, rates: dict[int, float], timeout: float | None = None) -> None:
        self.rates = rates
        self.nodes = [Tracker(), Tracker()]
        self.node0 = Aggregator(progress_timeout=timeout)
        self.lines: list[str] = []

    def run(self, start: int, end: int, beat: int = 5, stop: int | None = None) -> None:
        """From `start` to `end` seconds; the steps stop at `stop` (the bars drawn on)."""
        for now in range(start, end + 1, beat):
            for rank, rate in self.rates.items():
                step = int(min(now, stop if stop is not None else now) * rate)
                self.nodes[rank // 4].feed(rank, _bar(step), float(now))
            for index, tracker in enumerate(self.nodes):
                report = tracker.report(float(now))
                wire = None if report is None else json.dumps(report.to_wire())
                got = None if wire is None else NodeReport.from_wire(json.loads(wire))
                self.node0.add(index, got, float(now))
            line = self.node0.status(float(now))
            if line is not None:
                self.lines.append(f"{now}: {line}")


def test_the_job_json_progress_section_of_a_2x4_job() -> None:
    job = Job({rank: 2.0 if rank != 6 else 0.5 for rank in range(8)})
    job.run(0, 300)
    section = job.node0.section(300.0)
    assert section is not None
    fast = {"total": TOTAL, "rate": 2.0}
    assert section == {
        "unit": "steps",
        "step": 600,
        "total": TOTAL,
        "rate": 2.0,
        "seconds_left": 200,
        "ranks": [
            {"rank": r, "node": r // 4, "step": 600 if r != 6 else 150, **fast}
            if r != 6
            else {"rank": 6, "node": 1, "step": 150, "total": TOTAL, "rate": 0.5}
            for r in range(8)
        ],
        "ranks_left_out": 0,
        "slowest": [
            {"rank": 6, "node": 1, "step": 150, "total": TOTAL, "rate": 0.5},
            *({"rank": r, "node": r // 4, "step": 600, **fast} for r in (0, 1, 2, 3)),
        ],
        "stragglers": [{"rank": 6, "node": 1, "rate": 0.5, "median_rate": 2.0, "slow_for": 295.0}],
    }
    json.dumps(section)  # job.json takes it as it is


def test_the_status_line_its_cadence_and_a_straggler_named() -> None:
    job = Job({rank: 2.0 if rank != 6 else 0.5 for rank in range(8)})
    job.run(0, 130)
    # The first progress at once, then every STATUS_EVERY seconds while the step moves, and
    # at once when rank 6 has been below half the median rate for STRAGGLER_WINDOW (60 s):
    # at 65 s, its rate known from its second sight (5 s).
    assert STATUS_EVERY == 10
    times = [int(line.split(":")[0]) for line in job.lines]
    assert times == [0, 10, 20, 30, 40, 50, 60, 65, 75, 85, 95, 105, 115, 125]
    assert job.lines[0] == "0: step 0 of 1,000"
    assert job.lines[1] == (
        "10: step 20 of 1,000 · 2 steps/s · slowest rank 6 (node 1) at 5 · about 8 min left"
    )
    assert job.lines[7] == (
        "65: step 130 of 1,000 · 2 steps/s · slowest rank 6 (node 1) at 32 · about 7 min left"
        " · stragglers: rank 6 (node 1)"
    )
    (straggler,) = job.node0.stragglers(130.0)
    assert straggler.say("steps") == (
        "straggler: rank 6 (node 1) at 0.5 steps/s, below 0.5 x the median 2 steps/s for 125s"
    )


def test_nothing_said_while_nothing_moves() -> None:
    job = Job({rank: 1.0 for rank in range(8)})
    job.run(0, 30)
    said = len(job.lines)
    job.run(35, 100, stop=30)
    assert len(job.lines) == said


def test_steps_that_stop_while_the_ranks_print_are_a_hang() -> None:
    job = Job({rank: 1.0 for rank in range(8)}, timeout=120.0)
    job.run(0, 60)
    assert job.node0.stalled(60.0, last_line=60.0) is None
    job.run(65, 180, stop=60)  # the bars are redrawn, at the same step
    assert job.node0.stalled(175.0, last_line=174.0) is None  # 115 s without a step
    assert job.node0.stalled(180.0, last_line=179.0) == (
        "the steps have not advanced for 120s (at step 60) while the ranks keep printing"
        " (--progress-timeout)"
    )
    # silent ranks are the hang watchdog's (hang_timeout), not this
    assert job.node0.stalled(180.0, last_line=60.0) is None


def test_no_verdict_without_a_timeout_or_before_any_progress() -> None:
    assert Aggregator(progress_timeout=10.0).stalled(100.0, last_line=99.0) is None
    job = Job({rank: 1.0 for rank in range(8)})
    job.run(0, 300, stop=0)
    assert job.node0.stalled(300.0, last_line=299.0) is None


def test_a_node_of_several_maruns_reports_per_slot() -> None:
    """Ascend per device: each device's marun reports its own rank; one slot's report does not
    drop the other's ranks, and a rank left out of its own slot's next report goes."""
    node0 = Aggregator()
    for slot in (0, 1):
        tracker = Tracker()
        tracker.feed(slot, b"step 5\n", 0.0)
        node0.add(1, tracker.report(0.0), 0.0, slot=slot)
    section = node0.section(0.0)
    assert section is not None and [r["rank"] for r in section["ranks"]] == [0, 1]
    node0.add(1, NodeReport(()), 1.0, slot=1)
    section = node0.section(1.0)
    assert section is not None and [r["rank"] for r in section["ranks"]] == [0]


def test_nodes_without_progress_send_nothing() -> None:
    tracker = Tracker()
    tracker.feed(0, b"loading the dataset\n", 0.0)
    assert tracker.report(0.0) is None
    node0 = Aggregator()
    node0.add(0, None, 0.0)
    assert node0.section(0.0) is None and node0.status(0.0) is None


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(40, "40 s"), (720, "12 min"), (9000, "2 h 30 min"), (7200, "2 h")],
)
def test_duration(seconds: float, said: str) -> None:
    assert duration(seconds) == said
