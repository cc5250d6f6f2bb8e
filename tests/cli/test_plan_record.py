"""`marun run` keeps the plan it carries out with its logs (part 19, item 8): `plan.json` in the
log directory, exactly `marun plan --format json` for the same inputs, secrets masked, mode 0600;
also when the one process is exec'd."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from conftest import free_port, run_marun

SECRET = "sk-live-0123456789"


@pytest.mark.parametrize("nproc", ["2", "1"], ids=["supervised", "execd"])
def test_run_writes_the_plan_it_carries_out_secrets_masked(nproc: str, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import os\nprint('rank', os.environ['RANK'])\n")
    options = [
        *("--standalone", "--master-port", str(free_port()), "--nproc-per-node", nproc),
        *("--log-dir", "logs"),
    ]
    command = ["--", "train.py", "--api_key", SECRET]
    env = {"MA_VJ_NAME": "job-a"}
    planned = run_marun(["plan", "--format", "json", *options, *command], env, tmp_path)
    assert planned.returncode == 0, planned.stderr
    ran = run_marun(["run", *options, *command], env, tmp_path)
    assert ran.returncode == 0, ran.stderr
    record = tmp_path / "logs" / "plan.json"
    text = record.read_text()
    assert json.loads(text) == json.loads(planned.stdout)
    assert SECRET not in text
    assert "--api_key" in text
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    (proc, *_) = json.loads(text)["nodes"][0]["processes"]
    assert proc["env"]["RANK"] == "0" and proc["env"]["TORCHELASTIC_RUN_ID"] == "job-a"
