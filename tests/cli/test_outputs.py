"""What marun prints: plan formats (table on a terminal, JSON otherwise, YAML), its own log
(structlog, JSON lines on request), and that no secret value reaches any of them."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import clean_env, run_marun

PT_ARGS = ["--init_method", "tcp://127.0.0.1:29500"]
SECRETS = {"OBS_SECRET_ACCESS_KEY": "s3cr3t-value", "MA_AK": "ak-value", "JOB_TOKEN": "tok-value"}


def plan_args(script: Path, fmt: str | None = None) -> list[str]:
    out = ["plan", "--mode", "pytorch", "--nproc-per-node", "2"]
    if fmt:
        out += ["--format", fmt]
    return [*out, "--", script.name, "--api_key", "argv-secret", *PT_ARGS]


def test_json_is_the_default_when_piped(script: Path) -> None:
    res = run_marun(plan_args(script), cwd=script.parent)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["schema"] == 1 and data["mode"] == "pytorch"
    assert [p["name"] for p in data["nodes"][0]["processes"]] == ["rank0", "rank1"]


def test_table_is_the_default_on_a_terminal(script: Path) -> None:
    # A real pseudo-terminal: what a user at a shell sees.
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "marun", *plan_args(script)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        cwd=script.parent,
        env=clean_env(),
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0
    os.close(leader)
    text = b"".join(chunks).decode()
    assert text.startswith("mode: pytorch   nodes: 1   processes: 2")
    assert "shared by every process (2)" in text and "  rank1    1" in text


def test_yaml_matches_json(script: Path) -> None:
    as_yaml = yaml.safe_load(run_marun(plan_args(script, "yaml"), cwd=script.parent).stdout)
    as_json = json.loads(run_marun(plan_args(script, "json"), cwd=script.parent).stdout)
    as_yaml["nodes"][0]["processes"][0]["env"].pop("MASTER_PORT")
    as_json["nodes"][0]["processes"][0]["env"].pop("MASTER_PORT")
    assert as_yaml == as_json


def test_no_secret_in_any_plan_format(script: Path) -> None:
    for fmt in ("table", "json", "yaml"):
        # Secrets set by the user and passed through: marun's env delta would show them.
        res = run_marun(plan_args(script, fmt), env=SECRETS, cwd=script.parent)
        assert res.returncode == 0, res.stderr
        for value in (*SECRETS.values(), "argv-secret"):
            assert value not in res.stdout + res.stderr, (fmt, value)
        assert "--api_key" in res.stdout and "***" in res.stdout


def test_log_is_json_lines_on_request_and_masks_secrets(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    res = run_marun(
        [
            "run",
            "--mode",
            "pytorch",
            "--supervise",
            "--",
            "job.py",
            "--password",
            "hunter2",
            *PT_ARGS,
        ],
        env={"MARUN_LOG_FORMAT": "json", **SECRETS},
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in res.stderr.splitlines() if line.strip()]
    names = [e["event"] for e in events]
    assert "process_started" in names and "job_finished" in names
    assert all("level" in e and "timestamp" in e for e in events)
    for value in (*SECRETS.values(), "hunter2"):
        assert value not in res.stderr
    # Files marun writes are private to the user.
    result = tmp_path / "marun_logs" / "result.json"
    assert result.stat().st_mode & 0o077 == 0
    assert (tmp_path / "marun_logs" / "rank_0.log").stat().st_mode & 0o077 == 0
