"""The failure summary people read: the first failure once, then one line per other process,
each ending said without contradicting itself."""

from __future__ import annotations

import signal

from marun.plan.launch_plan import ProcessSpec
from marun.runtime.output import new_tail
from marun.runtime.reaper import Ending
from marun.runtime.result import (
    JobRecord,
    ProcessRecord,
    failure_summary,
    how_it_ended,
    job_failure_summary,
)


def _proc(
    name: str, rank: int | None, ending: Ending | None, sent: int | None = None
) -> ProcessRecord:
    spec = ProcessSpec(name, ("python", "t.py"), {}, "/w", f"/logs/{name}.log", rank=rank)
    rec = ProcessRecord(spec=spec, tail=new_tail(), pids=[100 + (rank or 0)], ending=ending)
    rec.stopped_by = sent
    return rec


def test_an_ending_after_marun_s_signal_says_both_without_contradiction() -> None:
    term = int(signal.SIGTERM)
    assert how_it_ended(_proc("r", 0, Ending(143, term), term)) == "stopped by marun (SIGTERM)"
    assert how_it_ended(_proc("r", 0, Ending(1), term)) == "exit code 1 after marun sent it SIGTERM"
    assert how_it_ended(_proc("r", 0, Ending(1))) == "exit code 1"
    killed = how_it_ended(_proc("r", 0, Ending(137, 9), 9))
    assert killed == "stopped by marun (SIGKILL)"
    assert how_it_ended(_proc("r", 0, None)) == "still running"


def test_the_first_failure_is_printed_once_then_one_line_per_other_process() -> None:
    first = _proc("rank1", 1, Ending(7))
    first.tail.extend(["Traceback (most recent call last):", "ModuleNotFoundError: No module"])
    sched = _proc("scheduler", None, Ending(143, 15), 15)
    job = JobRecord("mindspore", 0, "h", [sched, first])
    job.first_failure, job.exit_code = first, 7
    text = failure_summary(job)
    assert text.count("ModuleNotFoundError") == 1
    assert "First failure: rank1 (rank 1), exit code 7 (pid 101)" in text
    assert "\n  scheduler: stopped by marun (SIGTERM)\n" in text
    assert "None" not in text and "rank -" not in text


def test_a_coordinated_node_names_a_rankless_first_failure_plainly() -> None:
    job = JobRecord("mindspore", 1, "h1", [_proc("worker1", 1, Ending(143, 15), 15)])
    failure = {"node": 0, "host": "h0", "name": "scheduler", "rank": None, "exit_code": 3,
               "signal": None, "log": "/l/scheduler.log", "tail": ["boom"]}  # fmt: skip
    text = job_failure_summary(job, 3, failure)
    assert "Job's first failure: node 0 (h0), process scheduler, exit code 3" in text
    assert "(rank None)" not in text and "    | boom" in text
    assert "\n  worker1 (rank 1): stopped by marun (SIGTERM)\n" in text
    # On a shared console (marun simulate) another node prints the last lines.
    brief = job_failure_summary(job, 3, failure, tail_on=0)
    assert "boom" not in brief and "(its last lines: in node 0's summary)" in brief
