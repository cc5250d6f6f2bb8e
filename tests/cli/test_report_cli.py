"""`marun report` through the command: a job's report printed from its log directory (here a
one-node job's, whose result.json is the whole record), `--format json` parsed by a tool, the
default directory (MARUN_LOG_DIR), and the refusals: one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_marun


def _one_node_job(log_dir: Path) -> None:
    log_dir.mkdir()
    log = log_dir / "rank_0.log"
    log.write_text("epoch 1\nKeyError: 'label'\n")
    proc = {"name": "rank0", "rank": 0, "log": str(log), "exit_code": 1, "signal": None}
    result = {"schema": 1, "mode": "pytorch", "node": 0, "host": "h0", "outcome": "failed"}
    result.update(exit_code=1, started="2026-01-01T10:00:00.000+08:00")
    result.update(ended="2026-01-01T10:00:02.500+08:00", processes=[proc])
    result["first_failure"] = {"name": "rank0", "rank": 0, "exit_code": 1, "signal": None}
    (log_dir / "result.json").write_text(json.dumps(result))


def test_report_text_json_and_default_directory(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    _one_node_job(logs)
    text = run_marun(["report", str(logs)])
    assert text.returncode == 0, text.stderr  # a report was made, whatever the job's outcome
    assert text.stdout.splitlines()[:4] == [
        "job (no job.json: one node's view): failed, exit code 1 (1 nodes, 0 round(s), 2.50s)",
        "first failure: node 0 (h0) rank 0 [rank0] exit 1",
        f"  log: {logs / 'rank_0.log'}",
        "  | epoch 1",
    ]
    as_json = run_marun(["report", str(logs), "--format", "json"])
    summary = json.loads(as_json.stdout)
    assert (summary["schema"], summary["outcome"], summary["exit_code"]) == (1, "failed", 1)
    assert summary["first_failure"]["tail"][-1] == "KeyError: 'label'"
    default = run_marun(["report"], env={"MARUN_LOG_DIR": str(logs)})
    assert default.stdout == text.stdout


def test_report_refuses_in_one_line(tmp_path: Path) -> None:
    empty = run_marun(["report", str(tmp_path)])
    assert empty.returncode == 2 and empty.stdout == ""
    assert empty.stderr.startswith("marun: error: LOG_DIR=") and empty.stderr.count("\n") == 1
    logs = tmp_path / "logs"
    _one_node_job(logs)
    unwritable = run_marun(["report", str(logs), "--html", str(tmp_path / "no" / "x.html")])
    assert unwritable.returncode == 2
    assert unwritable.stderr.startswith("marun: error: --html=")
    bad = run_marun(["report", str(logs), "--format", "yaml"])
    assert bad.returncode == 2 and bad.stderr.startswith("marun: error:")
