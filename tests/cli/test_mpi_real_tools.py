"""MPI mode's plan carried out by the real OpenSSH and Open MPI tools: the real sshd reads the
rendered config and lets mpirun's ssh in (and no password), mpirun takes the planned argv, and
the package finds its sshd template with no checkout around it. Each starts processes, so they
live here and not in tests/unit."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, free_port
from mpi_plans import JOB, files_of, job_dir, mpirun_of, plan_json, platform_env, procs_of


@pytest.fixture
def job(tmp_path: Path) -> Path:
    return job_dir(tmp_path)


def test_template_is_read_from_the_package_alone(tmp_path: Path) -> None:
    """A copy of the package with no checkout around it (a wheel's layout) finds its template."""
    site = tmp_path / "site"
    shutil.copytree(REPO / "src" / "marun", site / "marun")
    code = (
        "import marun, sys; from marun.mpi.sshd_config import read_template; "
        "sys.stdout.write(marun.__file__ + '\\n' + read_template('sshd_config'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": str(site)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    where, _, text = res.stdout.partition("\n")
    assert where.startswith(str(site))
    assert text == (REPO / "src" / "marun" / "mpi" / "templates" / "sshd_config").read_text()


# -- the real sshd reads the rendered config -----------------------------------------------------


def _sshd_cmd(config: str, *args: str) -> list[str]:
    """sshd as root needs its privilege-separation directory /run/sshd, which nothing creates on
    this machine: give it one in a private mount namespace rather than touch the real /run."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    cmd = [sshd, *args, "-f", config]
    if os.getuid() != 0 or os.path.isdir("/run/sshd"):
        return cmd
    if shutil.which("unshare") is None:
        pytest.skip("running as root without /run/sshd and without unshare")
    script = 'mount -t tmpfs -o mode=755 marun-test-run /run && mkdir -m 755 /run/sshd && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *cmd]


@pytest.fixture
def rendered(job: Path) -> Iterator[tuple[dict[str, Any], Path]]:
    """A 2-node plan with a platform-mounted key, its sshd config and host key on disk."""
    if not (shutil.which("sshd") or os.path.exists("/usr/sbin/sshd")):
        pytest.skip("openssh-server is not installed")
    ssh = job / "ssh"
    for name in ("id_rsa", "id_rsa.pub", "authorized_keys"):
        (ssh / name).unlink()
    # Named as Volcano's ssh plugin names it; the key type does not matter to ssh.
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    subprocess.run([*keygen, "-f", str(ssh / "id_rsa")], check=True)
    shutil.copy(ssh / "id_rsa.pub", ssh / "authorized_keys")
    port = free_port()  # sshd binds it later: below the ephemeral range (conftest)
    env = platform_env(job, 2, 1, MARUN_SSHD_PORT=str(port), LD_LIBRARY_PATH="/opt/my libs")
    data = plan_json(job, env)
    node = data["nodes"][1]
    config = Path(next(f["path"] for f in node["files"]))
    config.parent.mkdir(parents=True)
    config.write_text(files_of(node)["sshd_config"])
    subprocess.run([*keygen, "-f", str(config.parent / "ssh_host_ed25519_key")], check=True)
    yield data, config


@pytest.mark.e2e
def test_real_sshd_accepts_the_config(rendered: tuple[dict[str, Any], Path]) -> None:
    data, config = rendered
    check = subprocess.run(
        _sshd_cmd(str(config), "-t"), check=False, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    dump = subprocess.run(_sshd_cmd(str(config), "-T"), check=False, capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    effective = dump.stdout.splitlines()
    for line in [
        "passwordauthentication no",
        "kbdinteractiveauthentication no",
        "pubkeyauthentication yes",
        "authenticationmethods publickey",
        "permitrootlogin without-password",  # sshd -T's name for prohibit-password
        "usepam no",
        "setenv LD_LIBRARY_PATH=/opt/my libs",
    ]:
        assert line in effective
    argv = mpirun_of(procs_of(data["nodes"][0])["mpi-leader"]["argv"])
    port = argv[argv.index("plm_rsh_args") + 1].split()[1]
    assert f"port {port}" in effective


@pytest.mark.e2e
def test_real_sshd_lets_mpiruns_ssh_in_and_refuses_passwords(
    rendered: tuple[dict[str, Any], Path],
) -> None:
    """Start sshd from the rendered config and log in with exactly the ssh options the plan
    gives mpirun (plm_rsh_args); a password-only client is refused."""
    data, config = rendered
    argv = mpirun_of(procs_of(data["nodes"][0])["mpi-leader"]["argv"])
    rsh = argv[argv.index("plm_rsh_args") + 1].split()
    port = int(rsh[1])
    sshd = subprocess.Popen(_sshd_cmd(str(config), "-D", "-e"), stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(200):  # until it listens (or has died), at most about 10 s
            if sshd.poll() is not None:
                break
            with socket.socket() as s:
                s.settimeout(0.05)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        assert sshd.poll() is None, sshd.stderr.read() if sshd.stderr else ""
        ssh = ["ssh", "-F", "/dev/null", *rsh, "127.0.0.1"]
        login = subprocess.run(
            [*ssh, "printenv", "LD_LIBRARY_PATH"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if login.returncode != 0:
            sshd.terminate()
            _, said = sshd.communicate(timeout=10)
            pytest.fail(f"{login.stderr}\nsshd said: {said}")
        assert login.stdout.strip() == "/opt/my libs"  # SetEnv reached the session
        password = [
            "ssh",
            "-F",
            "/dev/null",
            *("-p", str(port), "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no"),
            *("-o", "PreferredAuthentications=password,keyboard-interactive"),
            *("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"),
            *("127.0.0.1", "true"),
        ]
        refused = subprocess.run(password, check=False, capture_output=True, text=True, timeout=30)
        assert refused.returncode == 255
        assert "Permission denied (publickey)" in refused.stderr
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)


@pytest.mark.e2e
def test_real_mpirun_takes_the_planned_argv(job: Path) -> None:
    """One node, two slots: the planned mpi-leader runs Open MPI 4 with the planned argv as is
    (every flag and MCA name is one it knows) from the planned hostfile; no ssh is involved on a
    single node, and the leader forms no cluster."""
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed")
    # One write per line: --tag-output tags each chunk Open MPI reads, so `print(a, b)` under
    # PYTHONUNBUFFERED=1 (several writes) can come out with a tag in mid-line.
    (job / "train.py").write_text(
        "import os, sys\n"
        "rank, job = os.environ['OMPI_COMM_WORLD_RANK'], os.environ['MA_VJ_NAME']\n"
        "sys.stdout.write(f'rank {rank} {job}\\n')\n"
    )
    data = plan_json(job, platform_env(job, 1, 2))
    node = data["nodes"][0]
    hostfile = next(f for f in node["files"] if f["path"].endswith("/hostfile"))
    Path(hostfile["path"]).parent.mkdir(parents=True)
    Path(hostfile["path"]).write_text(hostfile["content"])
    argv = procs_of(node)["mpi-leader"]["argv"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MA_", "OMPI_"))}
    env.update({"MA_VJ_NAME": JOB, "MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "2"})
    res = subprocess.run(
        argv, cwd=job, env=env, check=False, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    lines = sorted(line.split("<stdout>:", 1)[1] for line in res.stdout.splitlines())
    assert lines == [f"rank 0 {JOB}", f"rank 1 {JOB}"], res.stdout  # [job,rank]<stdout>:
