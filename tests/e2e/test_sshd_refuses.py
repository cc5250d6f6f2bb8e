"""The sshd MPI mode starts lets in exactly one thing: the job's key, as the job's user. A real
sshd (started as the plan starts it: `python -m marun.mpi.sshd_bootstrap ... -- sshd -D`) and a
real ssh client try a password, an unknown key, and the right key as another user."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import clean_env, free_port

pytestmark = pytest.mark.e2e

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
SSH = shutil.which("ssh")
ME = pwd.getpwuid(os.getuid()).pw_name


class Server:
    def __init__(self, run: Path, port: int) -> None:
        self.run, self.port = run, port

    def ssh(
        self, user: str, *options: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(SSH),
                *("-p", str(self.port), "-o", "StrictHostKeyChecking=no"),
                *("-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10"),
                *options,
                f"{user}@127.0.0.1",
                "echo in-as-$(id -un)",
            ],
            env=clean_env(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    if SSHD is None or SSH is None:
        pytest.skip("openssh-server and openssh-client are needed")
    from marun.mpi.run_dir import AUTHORIZED_KEYS, HOST_KEY, PID_FILE, SSHD_CONFIG
    from marun.mpi.sshd_config import render_sshd_config

    run = tmp_path / "run"
    run.mkdir()
    port = free_port()
    config = run / SSHD_CONFIG
    config.write_text(
        render_sshd_config(
            port=port,
            host_key=str(run / HOST_KEY),
            pid_file=str(run / PID_FILE),
            authorized_keys=(str(run / AUTHORIZED_KEYS),),
            hosts=1,
            user=ME,
            listen_address="127.0.0.1",
        )
    )
    argv = [
        *(sys.executable, "-m", "marun.mpi.sshd_bootstrap", "--run-dir", str(run)),
        *("--new-identity", str(run / "id_ed25519"), "--"),
        *(str(SSHD), "-D", "-e", "-f", str(config)),
    ]
    if os.getuid() == 0:
        # sshd as root wants /run/sshd: give it an empty /run of its own, as in a new container.
        script = 'mount -t tmpfs -o mode=755 marun-test-run /run && exec "$@"'
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]
    log = open(tmp_path / "sshd.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, env=clean_env(), stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, (tmp_path / "sshd.log").read_text()
            assert time.monotonic() < deadline, "sshd did not listen"
            time.sleep(0.05)
        yield Server(run, port)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_the_job_key_as_the_job_user_gets_in(server: Server) -> None:
    """The control: without it, every refusal below could be a server that lets nobody in."""
    res = server.ssh(ME, "-i", str(server.run / "id_ed25519"), "-o", "BatchMode=yes")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"in-as-{ME}"


def test_a_password_is_never_asked_for(server: Server, tmp_path: Path) -> None:
    """The client offers a password (through SSH_ASKPASS, which records being asked); the server
    offers only publickey, so the password is never even requested."""
    asked = tmp_path / "asked"
    askpass = tmp_path / "askpass.sh"
    askpass.write_text(f"#!/bin/sh\necho asked >> {asked}\necho not-the-password\n")
    askpass.chmod(0o700)
    res = server.ssh(
        ME,
        *("-v", "-o", "BatchMode=no", "-o", "PubkeyAuthentication=no"),
        *("-o", "PreferredAuthentications=password,keyboard-interactive"),
        *("-o", "NumberOfPasswordPrompts=1"),
        env={"SSH_ASKPASS": str(askpass), "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"},
    )
    assert res.returncode == 255, res.stdout
    assert "Permission denied (publickey)" in res.stderr
    assert "Authentications that can continue: publickey\n" in res.stderr
    assert not asked.exists(), "the client was asked for a password"
    assert "in-as-" not in res.stdout


def test_an_unknown_key_is_refused(server: Server, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
        check=True,
        capture_output=True,
    )
    res = server.ssh(ME, "-i", str(stranger), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes")
    assert res.returncode == 255
    assert "Permission denied (publickey)" in res.stderr
    assert "in-as-" not in res.stdout


def test_the_job_key_as_another_user_is_refused(server: Server) -> None:
    other = "nobody" if ME != "nobody" else "root"
    res = server.ssh(
        other,
        *("-i", str(server.run / "id_ed25519"), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"),
    )
    assert res.returncode == 255
    assert "Permission denied (publickey)" in res.stderr
    assert "in-as-" not in res.stdout
