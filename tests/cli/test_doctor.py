"""`marun doctor` through the real CLI: each check's verdict, the exit code, both formats."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO, run_marun


@pytest.fixture
def ssh_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    (d / "id_rsa").write_text("not a real key\n")
    (d / "id_rsa").chmod(0o600)
    (d / "authorized_keys").write_text("ssh-ed25519 AAAA test\n")
    (d / "authorized_keys").chmod(0o644)
    yield d


def doctor(tmp_path: Path, *args: str, **env: str) -> tuple[int, dict[str, dict[str, str]]]:
    res = run_marun(["doctor", "--format", "json", *args], env=env, cwd=tmp_path)
    data = json.loads(res.stdout)
    assert data["ok"] is (res.returncode == 0), res.stdout
    return res.returncode, {c["name"]: c for c in data["checks"]}


def test_healthy_machine_passes(tmp_path: Path, ssh_dir: Path) -> None:
    code, checks = doctor(tmp_path, MARUN_SSH_DIR=str(ssh_dir))
    assert code == 0, checks
    assert checks["python"]["status"] == "ok"
    for dep in ("typer", "netifaces-plus", "PyYAML", "tenacity", "structlog"):
        assert checks[dep]["status"] == "ok"
    assert checks["ssh id_rsa"]["status"] == "ok"
    assert checks["rank table"]["status"] == "skip"


def test_private_key_readable_by_others_fails(tmp_path: Path, ssh_dir: Path) -> None:
    # What Volcano's ssh plugin mounts for non-root users (0644): ssh refuses such a key.
    (ssh_dir / "id_rsa").chmod(0o644)
    code, checks = doctor(tmp_path, "--mode", "mpi", MARUN_SSH_DIR=str(ssh_dir))
    assert code == 1
    assert checks["ssh id_rsa"]["status"] == "fail"
    assert "0644" in checks["ssh id_rsa"]["detail"]


def test_group_writable_ssh_dir_fails(tmp_path: Path, ssh_dir: Path) -> None:
    ssh_dir.chmod(0o775)
    code, checks = doctor(tmp_path, MARUN_SSH_DIR=str(ssh_dir))
    assert code == 1
    assert "writable by group" in checks[f"ssh dir {ssh_dir}"]["detail"]


def test_rank_table_checked_without_waiting(tmp_path: Path, ssh_dir: Path) -> None:
    table = tmp_path / "rt.json"
    table.write_text('{"status": "completed", "group_list": [')
    code, checks = doctor(tmp_path, RANK_TABLE_FILE=str(table), MARUN_SSH_DIR=str(ssh_dir))
    assert code == 1
    assert checks["rank table"]["status"] == "fail"
    assert "JSON" in checks["rank table"]["detail"]
    table.write_text('{"status": "initializing"}')
    code, checks = doctor(tmp_path, RANK_TABLE_FILE=str(table), MARUN_SSH_DIR=str(ssh_dir))
    assert checks["rank table"]["status"] == "warn"


def test_busy_port_fails(tmp_path: Path, ssh_dir: Path) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code, checks = doctor(
            tmp_path, "--mode", "mpi", MARUN_SSHD_PORT=str(port), MARUN_SSH_DIR=str(ssh_dir)
        )
    assert checks[f"port {port}"]["status"] == "fail"
    assert code == 1


def test_missing_framework_fails_for_its_mode(tmp_path: Path, ssh_dir: Path) -> None:
    code, checks = doctor(tmp_path, "--mode", "tensorflow", MARUN_SSH_DIR=str(ssh_dir))
    # The dev venv has no TensorFlow (each framework lives in its own venv).
    assert checks["framework (tensorflow)"]["status"] == "fail"
    assert sys.executable in checks["framework (tensorflow)"]["detail"]
    assert code == 1


def test_shared_host_name_is_warned(tmp_path: Path, ssh_dir: Path) -> None:
    env = {
        "MA_NUM_HOSTS": "2",
        "VC_TASK_INDEX": "1",
        "VC_WORKER_HOSTS": "job-worker-0.job,job-worker-1.job",
        "MARUN_SSH_DIR": str(ssh_dir),
    }
    _, checks = doctor(tmp_path, **env)
    if socket.gethostname() != "job-worker-1":
        assert checks["host name"]["status"] == "warn"
        assert "job-worker-1" in checks["host name"]["detail"]


def test_table_format(tmp_path: Path, ssh_dir: Path) -> None:
    res = run_marun(
        ["doctor", "--format", "table"], env={"MARUN_SSH_DIR": str(ssh_dir)}, cwd=tmp_path
    )
    assert res.returncode == 0
    assert res.stdout.splitlines()[0].startswith("OK    python")
    assert res.stdout.rstrip().endswith("doctor: all checks passed")


@pytest.mark.e2e
def test_framework_found_in_its_own_venv(tmp_path: Path, ssh_dir: Path) -> None:
    venvs = Path(os.environ.get("MARUN_VENVS", REPO / ".cache" / "venvs"))
    python = venvs / "torch" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no torch venv at {python}: run scripts/frameworks.sh torch")
    import subprocess

    from conftest import clean_env

    res = subprocess.run(
        [str(python), "-m", "marun", "doctor", "--mode", "pytorch", "--format", "json"],
        env=clean_env({"MARUN_SSH_DIR": str(ssh_dir)}),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["framework (pytorch)"]["status"] == "ok"
    assert checks["framework (pytorch)"]["detail"].startswith("torch 2.")


def test_busy_job_port_fails_on_a_multi_node_job(tmp_path: Path, ssh_dir: Path) -> None:
    """Node 0's marun listens on job_port for the other nodes (every mode but MPI)."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        env = {"MARUN_JOB_PORT": str(port), "MARUN_SSH_DIR": str(ssh_dir)}
        code, checks = doctor(tmp_path, "--mode", "pytorch", MA_NUM_HOSTS="2", **env)
        _, single = doctor(tmp_path, "--mode", "pytorch", **env)
    assert checks[f"port {port}"]["status"] == "fail"
    assert f"job_port={port}" in checks[f"port {port}"]["detail"]
    assert code == 1
    assert f"port {port}" not in single  # one node: no coordination, no port


def test_a_multi_node_job_without_a_secret_is_warned(tmp_path: Path, ssh_dir: Path) -> None:
    """No MARUN_JOB_TOKEN and no ssh key: a forged failure could stop the job."""
    empty = tmp_path / "nossh"
    empty.mkdir(mode=0o700)
    _, checks = doctor(tmp_path, "--mode", "pytorch", MA_NUM_HOSTS="2", MARUN_SSH_DIR=str(empty))
    assert checks["job secret"]["status"] == "warn", checks
    assert "can stop the job with a forged failure" in checks["job secret"]["detail"]
    _, token = doctor(tmp_path, "--mode", "pytorch", MA_NUM_HOSTS="2", MARUN_JOB_TOKEN="t0k-v4lue")
    assert token["job secret"]["status"] == "ok"
    assert "t0k-v4lue" not in json.dumps(token)
    _, keyed = doctor(tmp_path, "--mode", "pytorch", MA_NUM_HOSTS="2", MARUN_SSH_DIR=str(ssh_dir))
    assert keyed["job secret"]["status"] == "ok"
    _, single = doctor(tmp_path, "--mode", "pytorch", MARUN_SSH_DIR=str(empty))
    assert "job secret" not in single


def test_with_the_start_command_doctor_checks_the_plan_run_would_make(
    tmp_path: Path, ssh_dir: Path
) -> None:
    """`marun doctor -- SCRIPT ARGS`: this node's plan, built as `marun plan` builds it; its
    refusal is doctor's failure, and the ports it checks are the plan's (the rendezvous of
    rank 0, node 0's job port), bound as `marun run` binds them."""
    (tmp_path / "train.py").write_text("print(1)\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        args = ["--mode", "pytorch", "--", "train.py", "--init_method", f"tcp://127.0.0.1:{taken}"]
        code, checks = doctor(tmp_path, *args, MARUN_SSH_DIR=str(ssh_dir))
    assert checks["plan"]["status"] == "ok", checks
    assert checks[f"port {taken}"]["status"] == "fail"
    assert f"rank0={taken}" in checks[f"port {taken}"]["detail"]
    assert code == 1
    res = run_marun(
        ["plan", "--mode", "pytorch", "--", "train.py"],
        cwd=tmp_path,
        env={"MARUN_SSH_DIR": str(ssh_dir)},
    )
    code, checks = doctor(tmp_path, "--mode", "pytorch", "--", "train.py")
    assert checks["plan"]["status"] == "fail"
    assert checks["plan"]["detail"] == res.stderr.strip().removeprefix("marun: error: ")
    assert code == 1
