"""The failure summary people read: the first failure once, then one line per other process,
each ending said without contradicting itself."""

from __future__ import annotations

import signal

from marun.plan.launch_plan import ProcessSpec
from marun.runtime.failure import Failure
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
    failure = Failure(node=0, host="h0", name="scheduler", exit_code=3, log="/l/scheduler.log",
                      tail=("boom",))  # fmt: skip
    text = job_failure_summary(job, 3, failure)
    assert "Job's first failure: node 0 (h0), process scheduler, exit code 3" in text
    assert "(rank None)" not in text and "    | boom" in text
    assert "\n  worker1 (rank 1): stopped by marun (SIGTERM)\n" in text
    # On a shared console (marun simulate) another node prints the last lines.
    brief = job_failure_summary(job, 3, failure, tail_on=0)
    assert "boom" not in brief and "(its last lines: in node 0's summary)" in brief


def test_the_rank_s_error_file_from_torch_s_record_is_in_the_summary(tmp_path: object) -> None:
    """torch's @record writes the exception to TORCHELASTIC_ERROR_FILE (part 19, item 7): the
    summary shows its type, message and traceback; a file not torch's JSON is left out."""
    import json
    from pathlib import Path

    error_file = Path(str(tmp_path)) / "rank_1.error.json"
    stack = "\n".join(
        ["Traceback (most recent call last):", '  File "/w/t.py", line 9, in main']
        + [f"    frame {i}" for i in range(60)]
        + ["ValueError: bad batch"]
    )
    error_file.write_text(
        json.dumps(
            {
                "message": {
                    "message": "ValueError: bad batch",
                    "extraInfo": {"py_callstack": stack, "timestamp": "1"},
                }
            }
        )
    )
    first = _proc("rank1", 1, Ending(1))
    first.spec = ProcessSpec(
        "rank1",
        ("python", "t.py"),
        {"TORCHELASTIC_ERROR_FILE": str(error_file)},
        "/w",
        "/l",
        rank=1,
    )
    job = JobRecord("pytorch", 0, "h", [first])
    job.first_failure, job.exit_code = first, 1
    text = failure_summary(job)
    assert f"its exception (from {error_file}, written by torch's @record):" in text
    assert "\n    ValueError: bad batch\n" in text
    assert "    | ... (23 lines above)" in text and "    | ValueError: bad batch" in text
    assert "frame 59" in text and "frame 0\n" not in text
    # this node's process in a multi-node job's summary too
    failure = Failure(node=0, host="h", name="rank1", rank=1, exit_code=1, tail=())
    assert "written by torch's @record" in job_failure_summary(job, 1, failure)
    error_file.write_text("not json")
    assert "@record" not in failure_summary(job)
    error_file.unlink()
    assert "@record" not in failure_summary(job)
