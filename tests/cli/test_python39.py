"""marun runs under Python 3.9, the oldest interpreter framework images ship: every mode's plan
is the same under 3.9 as under the development interpreter, and the supervisor's code paths
(selectors, signals, prctl, reaping) run there too. vermin checks the syntax floor statically in
scripts/test.sh; this runs the code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, REPO, clean_env

PY39 = Path(os.environ.get("MARUN_VENVS", REPO / ".cache" / "venvs")) / "py39" / "bin" / "python"

PLATFORM = {
    "MA_NUM_HOSTS": "2",
    "MA_NUM_GPUS": "2",
    "VC_TASK_INDEX": "0",
    "MA_VJ_NAME": "job",
    "MA_TASK_NAME": "worker",
    "VC_WORKER_HOSTS": "127.0.0.1,127.0.0.2",
}
TABLE = "ascend_tutorial_1x8.json"
CASES = {
    "pytorch": (["--", "train.py", "--init_method", "tcp://127.0.0.1:29500", "--rank", "0",
                 "--world_size", "2"], {}),
    "mindspore": (["--", "train.py"], {}),
    "tensorflow": (["--", "train.py", "--task_index", "0", "--ps_hosts", "[127.0.0.1:5000]",
                    "--worker_hosts", "[127.0.0.1:5001,127.0.0.2:5001]", "--job_name", "worker"],
                   {"MA_NUM_HOSTS": "1"}),
    # one node: a job of several needs the platform's mounted ssh key, which this test has not
    "mpi": (["--", "train.py"], {"MA_NUM_HOSTS": "1", "VC_WORKER_HOSTS": "127.0.0.1"}),
    "ascend": (["--", "train.py"], {"MA_NUM_HOSTS": "1", "RANK_ID": "3",
                                    "RANK_TABLE_FILE": str(DATA / "ranktables" / TABLE)}),
}  # fmt: skip


def _need_py39() -> None:
    if not PY39.exists():
        pytest.skip(f"no Python 3.9 venv at {PY39}: run scripts/bootstrap.sh")


def _plan(python: str, mode: str, cwd: Path) -> dict[str, object]:
    args, extra = CASES[mode]
    env = clean_env({**PLATFORM, **extra, "MARUN_RUN_DIR": str(cwd / "run")})
    res = subprocess.run(
        [python, "-m", "marun", "plan", "--mode", mode, "--all-nodes", "--format", "json", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, f"{python}: {res.stderr}"
    text = res.stdout.replace(python, "PYTHON")
    data: dict[str, object] = json.loads(text)
    return data


@pytest.mark.e2e
@pytest.mark.parametrize("mode", sorted(CASES))
def test_same_plan_under_python39(tmp_path: Path, mode: str) -> None:
    _need_py39()
    (tmp_path / "train.py").write_text("print('hi')\n")
    assert _plan(str(PY39), mode, tmp_path) == _plan(sys.executable, mode, tmp_path)


@pytest.mark.e2e
def test_supervisor_under_python39(tmp_path: Path) -> None:
    _need_py39()
    (tmp_path / "job.py").write_text(
        "import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(5)\ntime.sleep(30)\n"
    )
    res = subprocess.run(
        [str(PY39), "-m", "marun", "run", "--mode", "pytorch", "--nproc-per-node", "3",
         "--grace-period", "5", "--", "job.py", "--init_method", "tcp://127.0.0.1:29500"],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert res.returncode == 5, res.stderr
    assert "rank1" in res.stdout + res.stderr
    result = json.loads((tmp_path / "marun_logs" / "result.json").read_text())
    assert result["first_failure"]["rank"] == 1
