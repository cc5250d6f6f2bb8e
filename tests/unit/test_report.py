"""`marun report` (docs/supervision.md, "marun report"): from the files a job wrote, the outcome,
the first failure with its last lines, each round and how long until every rank ran again, the
phases' timings (the slowest node to arrive named), where the logs are; as text, JSON and one
self-contained HTML page. The files here are written by hand in the formats of job.json and
result.json (schema 1) as a 4-node job with one round and then a failure would leave them;
tests/e2e/test_report_browser.py reports a real simulated job."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from marun.errors import InputError
from marun.report.files import default_log_dir
from marun.report.render import render_html, render_text
from marun.report.summary import summarize

T0 = 1_800_000_000.0  # the job's start, wall-clock seconds


def iso(offset: float) -> str:
    return datetime.fromtimestamp(T0 + offset, timezone.utc).isoformat(timespec="milliseconds")


def write_job(root: Path) -> Path:
    """A 4-node job: node 2 arrives last (1.5 s); round 1 after node 2's rank 2 exit 3 at 4 s;
    node 3's rank 3 exit 7 at 9 s ends the job (no round left)."""
    node0 = root / "simulate" / "node0"
    for n in range(4):
        d = root / "simulate" / f"node{n}"
        d.mkdir(parents=True)
        (d / f"rank_{n}.log").write_text("step 1\nstep 2\nRuntimeError: NCCL timeout\n")
        name = "result.json" if n == 0 else f"result.node{n}.json"
        proc = {
            "name": f"rank{n}",
            "role": "worker",
            "rank": n,
            "log": str(d / f"rank_{n}.log"),
            "pids": [100 + n, 200 + n],
            "restarts": 1,
            "exit_code": 7 if n == 3 else 143,
            "signal": None,
            "started": iso(2.0 + n / 10),
            "ended": iso(9.0 if n == 3 else 9.5),
        }
        result = {"schema": 1, "mode": "pytorch", "node": n, "host": f"h{n}", "outcome": "failed"}
        result.update(exit_code=7, started=iso(0.1), ended=iso(9.8), processes=[proc])
        (d / name).write_text(json.dumps(result))
    (root / "simulate" / "result.json").write_text(
        json.dumps({"schema": 1, "mode": "simulate-pytorch", "node": 0, "processes": []})
    )
    rnd = {
        "round": 1,
        "cause": {"node": 2, "host": "h2", "name": "rank2", "rank": 2, "exit_code": 3},
        "detected_at": T0 + 4.0,
        "stopped_at": T0 + 4.25,
        "running_at": T0 + 4.5,
        "ranks": 4,
    }
    failure = {"node": 3, "host": "h3", "name": "rank3", "rank": 3, "exit_code": 7}
    failure.update(signal=None, log=str(root / "simulate/node3/rank_3.log"))
    failure.update(tail=["step 2", "RuntimeError: NCCL timeout"], no_restart="no round left")
    slots = [
        {"slot": 0, "arrived": iso(a), "ended": iso(10.0), "outcome": "failed", "exit_code": 7}
        for a in (0.1, 0.2, 1.5, 0.3)
    ]
    job = {"schema": 1, "job": "ma-job.0123456789ab", "nodes_expected": 4, "exit_code": 7}
    job.update(first_failure=failure, started=iso(0.0), ended=iso(10.0), refused_messages=0)
    job.update(round=1, rounds=[rnd])
    job["nodes"] = [{"index": n, "host": f"h{n}", "slots": [slots[n]]} for n in range(4)]
    (node0 / "job.json").write_text(json.dumps(job))
    (node0 / "marun-events.log").write_text(
        "2026-01-01T00:00:00.1 [info     ] node_arrived  node=0\n"
        "2026-01-01T00:00:04.0 [warning  ] job_restart  round=1\n"
        "2026-01-01T00:00:09.0 [error    ] job_stop  code=7\n"
    )
    return node0


def test_the_report_of_a_job_with_a_round_and_a_failure(tmp_path: Path) -> None:
    write_job(tmp_path)
    s = summarize(tmp_path)
    assert (s["outcome"], s["exit_code"], s["nodes_expected"]) == ("failed", 7, 4)
    ff = s["first_failure"]
    assert ff["summary"] == "node 3 (h3) rank 3 [rank3] exit 7"
    assert ff["tail"] == ["step 2", "RuntimeError: NCCL timeout"]
    assert ff["no_restart"] == "no round left"
    (r,) = s["rounds"]
    assert r["cause"] == "node 2 (h2) rank 2 [rank2] exit 3"
    assert (r["at"], r["stopped_after"], r["running_after"], r["ranks"]) == (4.0, 0.25, 0.5, 4)
    assert s["phases"]["arrival"] == {"seconds": 1.5, "slowest_node": 2, "slowest_host": "h2"}
    assert s["phases"]["start"]["seconds"] == 0.5  # last arrival 1.5 -> first rank 2.0
    assert s["phases"]["run"]["seconds"] == 8.0  # first rank 2.0 -> first node's end 10.0
    # every failure on the timeline, earliest first; only the job's own is `first`
    assert [(f["node"], f["at"], f["first"]) for f in s["failures"]] == [
        (2, 4.0, False),
        (3, 9.0, True),
    ]
    assert [n["arrived"] for n in s["nodes"]] == [0.1, 0.2, 1.5, 0.3]
    assert len(s["files"]["results"]) == 4  # the simulator's own result.json is no node's
    assert s["events"]["warnings"] == 1 and s["events"]["error_events"] == ["job_stop"]
    json.dumps(s)  # --format json prints it as it is


def test_the_text_says_it_in_a_few_lines(tmp_path: Path) -> None:
    write_job(tmp_path)
    text = render_text(summarize(tmp_path))
    lines = text.splitlines()
    assert lines[0] == "job ma-job.0123456789ab: failed, exit code 7 (4 nodes, 1 round(s), 10.00s)"
    assert lines[1] == "first failure: node 3 (h3) rank 3 [rank3] exit 7"
    assert "  | RuntimeError: NCCL timeout" in lines
    assert (
        "round 1 after node 2 (h2) rank 2 [rank2] exit 3: ranks stopped in 0.25s, all 4 ranks "
        "running again 0.50s after it was detected" in lines
    )
    assert any(line.startswith("phases: arrival 1.50s (slowest: node 2, h2)") for line in lines)
    assert f"logs: {tmp_path / 'simulate' / 'node3'}" in lines
    assert len(lines) <= 20


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, Any]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_the_page_is_self_contained_and_marks_the_first_failure(tmp_path: Path) -> None:
    write_job(tmp_path)
    page = render_html(summarize(tmp_path))
    parser = _Page()
    parser.feed(page)
    tags = [t for t, _ in parser.tags]
    assert "script" not in tags and "link" not in tags and "img" not in tags
    for _, attrs in parser.tags:  # nothing fetched: no URL but the SVG namespace
        for name, value in attrs.items():
            if name != "xmlns":
                assert "//" not in str(value), (name, value)
    groups = [a for t, a in parser.tags if t == "g"]
    kinds = sorted(str(a.get("class")) for a in groups)
    # a row per node (arrived, started, ended), one round, two failures
    assert kinds == sorted(
        ["mark arrived", "mark started", "mark ended"] * 4 + ["mark round"] + ["mark failure"] * 2
    )
    firsts = [a for a in groups if a.get("id") == "first-failure"]
    assert len(firsts) == 1 and firsts[0]["data-node"] == "3"
    assert page.count("<title>") == len(groups) + 1  # each mark's hover text, and the page's
    assert "round 1 after node 2 (h2) rank 2 [rank2] exit 3" in page


def test_one_node_without_job_json(tmp_path: Path) -> None:
    result = {"schema": 1, "mode": "pytorch", "node": 0, "host": "h0", "outcome": "failed"}
    log = tmp_path / "rank_1.log"
    log.write_text("a\nb\nZeroDivisionError: division by zero\n")
    proc = {"name": "rank1", "rank": 1, "log": str(log), "exit_code": 1}
    result.update(exit_code=1, started=iso(0), ended=iso(2), processes=[proc])
    result["first_failure"] = {"name": "rank1", "rank": 1, "exit_code": 1, "signal": None}
    (tmp_path / "result.json").write_text(json.dumps(result))
    s = summarize(tmp_path)
    assert (s["outcome"], s["exit_code"], s["job"]) == ("failed", 1, None)
    assert s["first_failure"]["summary"] == "node 0 (h0) rank 1 [rank1] exit 1"
    assert s["first_failure"]["tail"][-1] == "ZeroDivisionError: division by zero"  # from its log


def test_nothing_to_report_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"expected job\.json, result\.json or marun-events\.log"):
        summarize(tmp_path)
    with pytest.raises(InputError, match="LOG_DIR="):
        summarize(tmp_path / "missing")


def test_the_default_log_directory_is_marun_runs() -> None:
    assert default_log_dir({"MARUN_LOG_DIR": "/x", "MA_LOG_DIR": "/y"}) == Path("/x")
    assert default_log_dir({"MA_LOG_DIR": "/y"}) == Path("/y/marun")
    assert default_log_dir({}) == Path("marun_logs")


def test_a_failure_that_is_no_process_s_is_told_by_its_why(tmp_path: Path) -> None:
    node0 = write_job(tmp_path)
    job = json.loads((node0 / "job.json").read_text())
    why = "hang: no rank of the job wrote a line for 20s, and its ranks used 0.0s of CPU"
    job.update(exit_code=124, first_failure={"why": why, "stacks": {"0": "..."}})
    job["rounds"][0]["cause"] = {"why": "node 1 (h1) lost: no word from its marun for 60s"}
    (node0 / "job.json").write_text(json.dumps(job))
    lines = render_text(summarize(tmp_path)).splitlines()
    assert lines[1] == f"first failure: {why}"
    assert "  stacks: in job.json (first_failure.stacks) and in each rank's log" in lines
    assert lines[3].startswith("round 1 after node 1 (h1) lost: no word from its marun for 60s:")


def test_a_job_still_running_has_only_events(tmp_path: Path) -> None:
    (tmp_path / "marun-events.log").write_text("2026-01-01T00:00:00.1 [info ] job_start\n")
    s = summarize(tmp_path)
    assert (s["outcome"], s["exit_code"], s["nodes"]) == ("running", None, [])
    assert render_text(s).startswith("job (no job.json or result.json yet: still running?)")
    render_html(s)  # a page all the same, with no rows
