"""`marun simulate` with real frameworks: what a user runs on a laptop before paying for a
cluster. A TensorFlow parameter-server job (1 chief + 1 worker + 2 ps, under a chief the servers
are daemons) must finish with the chief's status and leave no server behind; a PyTorch DDP job
of 2 nodes x 2 devices must agree on every rank."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from local_cluster import EXAMPLES, framework_python, rank_results

from conftest import clean_env

pytestmark = pytest.mark.e2e


def simulate(python: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    tag = f"marun-e2e-sim-{tmp_path.name}"
    env = clean_env({"PATH": f"{python.parent}:{clean_env()['PATH']}", "MARUN_E2E_JOB_TAG": tag})
    try:
        return subprocess.run(
            [str(python), "-m", "marun", "simulate", "--no-show-plan", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
            check=False,
        )
    finally:
        left = subprocess.run(
            ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False
        )
        assert left.stdout.strip() == "", f"processes left behind: {left.stdout}"


def test_tensorflow_ps_job_with_chief(tmp_path: Path) -> None:
    python = framework_python("tensorflow")
    res = simulate(
        python, tmp_path, "--mode", "tensorflow", "--tf-chief", "--nodes", "2",
        "--grace-period", "20", "--", "examples/tf_ps.py",
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "chief: 5 steps done, global_step=5" in res.stdout
    for server in ("[0:ps0] ps 0: stopped by SIGTERM", "[1:ps1] ps 1: stopped by SIGTERM"):
        assert server in res.stdout


def test_pytorch_ddp_two_nodes(tmp_path: Path) -> None:
    python = framework_python("torch")
    res = simulate(
        python, tmp_path, "--mode", "pytorch", "--nodes", "2", "--devices", "2",
        "--", "examples/pytorch_ddp.py",
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    results = rank_results(res.stdout)
    assert sorted(results) == [0, 1, 2, 3]
    assert len({r.checksum for r in results.values()}) == 1
