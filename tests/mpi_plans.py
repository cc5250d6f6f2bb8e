"""MPI mode's plan as the tests see it: the platform's environment for a job directory, the plan
as JSON through the real CLI, and its parts by name (tests/unit/test_mode_mpi.py and
tests/cli/test_mpi_real_tools.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conftest import REPO, run_marun

JOB = "ma-job-0a1b2c"


def job_dir(tmp_path: Path) -> Path:
    """A working directory with the user's script, empty run/volcano directories, and an ssh
    directory as Volcano's ssh plugin mounts it (the plan only looks at the files and modes; the
    tests that start sshd put real keys there)."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    for sub in ("ssh", "volcano", "lib"):
        (tmp_path / sub).mkdir()
    mount_ssh_secret(tmp_path / "ssh")
    return tmp_path


def mount_ssh_secret(ssh: Path, *, mode: int = 0o600, files: tuple[str, ...] = ()) -> None:
    for name in files or ("id_rsa", "id_rsa.pub", "authorized_keys", "config"):
        (ssh / name).write_text(f"{name} as the platform mounted it\n")
        (ssh / name).chmod(mode)


def platform_env(job: Path, hosts: int, gpus: int, index: int = 0, **extra: str) -> dict[str, str]:
    env = {
        "MA_VJ_NAME": JOB,
        "MA_TASK_NAME": "worker",
        "VC_TASK_INDEX": str(index),
        "MA_NUM_HOSTS": str(hosts),
        "MA_NUM_GPUS": str(gpus),
        "LD_LIBRARY_PATH": str(job / "lib"),
        # The checkout's own marun first: the plan is made by the code under test.
        "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{job / 'lib'}",
        "MARUN_RUN_DIR": str(job / "run"),
        "MARUN_SSH_DIR": str(job / "ssh"),
        "MARUN_VOLCANO_DIR": str(job / "volcano"),
        "MARUN_NIC": "lo",
    }
    env.update(extra)
    return env


def plan_json(job: Path, env: Mapping[str, str], *args: str) -> dict[str, Any]:
    res = run_marun(
        ["plan", "--mode", "mpi", "--all-nodes", "--format", "json", "--", "train.py", *args],
        env=env,
        cwd=job,
    )
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def files_of(node: Mapping[str, Any]) -> dict[str, str]:
    return {os.path.basename(f["path"]): f["content"] for f in node["files"]}


def procs_of(node: Mapping[str, Any]) -> dict[str, Any]:
    return {p["name"]: p for p in node["processes"]}


def mpirun_of(leader: list[str]) -> list[str]:
    """The mpirun argv the leader runs: everything after its `--`."""
    return leader[leader.index("--") + 1 :]
