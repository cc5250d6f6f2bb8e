"""MPI mode's keys and sshd checks (marun.mpi.ssh_keys, marun.mpi.sshd_bootstrap), for real: real
files and modes, real ssh-keygen, and the real `sshd -T` deciding whether a config accepts
passwords.

sshd run as root needs its privilege-separation directory (/run/sshd), which nothing creates on
this machine: the tests that start sshd as root run it in a private mount namespace with an
empty /run of its own, which also shows marun creating that directory; the real /run is never
touched.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_env

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- the client key: ssh's own rule ---------------------------------------------------------------

# (mode, owned by someone else, error or None). ssh refuses a key of ours that others may read;
# a key of someone else's (Volcano mounts root's secret 0644 for a non-root user) it takes.
KEY_MODES = [
    pytest.param(0o600, False, None, id="0600"),
    pytest.param(0o400, False, None, id="0400"),
    pytest.param(0o640, False, "='0640': expected 0600", id="0640"),
    pytest.param(0o644, False, "='0644': expected 0600", id="0644"),
    pytest.param(0o644, True, None, id="0644-not-ours"),
]


@pytest.mark.parametrize(("mode", "foreign", "error"), KEY_MODES)
def test_check_private_key(tmp_path: Path, mode: int, foreign: bool, error: str | None) -> None:
    from marun.errors import InputError
    from marun.mpi.ssh_keys import check_private_key

    key = tmp_path / "id_rsa"
    key.write_text("key\n")
    key.chmod(mode)
    uid = os.getuid()
    if foreign:
        uid += 1  # the file is then someone else's, as root's mounted secret is to a user
    if error is None:
        check_private_key(str(key), uid)
        return
    with pytest.raises(InputError, match="UNPROTECTED PRIVATE KEY FILE") as info:
        check_private_key(str(key), uid)
    assert error in str(info.value)
    assert str(key) in str(info.value)


def test_check_private_key_missing(tmp_path: Path) -> None:
    from marun.errors import InputError
    from marun.mpi.ssh_keys import check_private_key

    with pytest.raises(InputError, match="No such file or directory"):
        check_private_key(str(tmp_path / "id_rsa"), os.getuid())


# -- generated keys, authorized_keys, the private run directory ---------------------------------


def test_generate_key_once_and_reuse(tmp_path: Path) -> None:
    from marun.errors import MarunError
    from marun.mpi.ssh_keys import generate_key

    key = tmp_path / "id_ed25519"
    assert generate_key(str(key), "marun test") is True
    assert _mode(key) == 0o600
    public = (tmp_path / "id_ed25519.pub").read_text()
    assert public.startswith("ssh-ed25519 ") and public.rstrip().endswith("marun test")
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True
    )
    assert derived.stdout.split()[:2] == public.split()[:2]  # a real pair

    assert generate_key(str(key), "marun test") is False  # an earlier start's key is kept
    assert (tmp_path / "id_ed25519.pub").read_text() == public

    (tmp_path / "id_ed25519.pub").unlink()
    with pytest.raises(MarunError, match="exists without"):
        generate_key(str(key), "marun test")


def test_write_authorized_keys(tmp_path: Path) -> None:
    from marun.mpi.ssh_keys import write_authorized_keys

    (tmp_path / "a.pub").write_text("ssh-ed25519 AAAA a\n\n")
    (tmp_path / "b.pub").write_text("ssh-rsa BBBB b")
    target = tmp_path / "authorized_keys"
    write_authorized_keys([str(tmp_path / "a.pub"), str(tmp_path / "b.pub")], str(target))
    assert target.read_text() == "ssh-ed25519 AAAA a\nssh-rsa BBBB b\n"
    assert _mode(target) == 0o600


def test_private_run_dir(tmp_path: Path) -> None:
    from marun._files import private_dir as make_private_dir
    from marun.errors import InputError

    fresh = tmp_path / "a" / "b"
    make_private_dir(str(fresh))
    assert _mode(fresh) == 0o700
    opened = tmp_path / "opened"
    opened.mkdir(mode=0o755)
    make_private_dir(str(opened))
    assert _mode(opened) == 0o700
    if os.getuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        os.chown(foreign, 1000, 1000)
        with pytest.raises(InputError, match="owned by uid 0"):
            make_private_dir(str(foreign))


# -- which sshd settings let a password in (sshd -T's words) ------------------------------------

EFFECTIVE = [
    pytest.param({}, [], id="nothing-enabled"),
    pytest.param({"passwordauthentication": ["yes"]}, ["password"], id="password-any"),
    pytest.param(
        {"passwordauthentication": ["yes"], "authenticationmethods": ["publickey"]},
        [],
        id="password-but-keys-required",
    ),
    pytest.param(
        {"kbdinteractiveauthentication": ["yes"], "authenticationmethods": ["any"]},
        ["keyboard-interactive"],
        id="kbd-interactive",
    ),
    pytest.param(
        {
            "kbdinteractiveauthentication": ["yes"],
            "authenticationmethods": ["publickey,keyboard-interactive:pam publickey"],
        },
        ["keyboard-interactive"],
        id="kbd-interactive-as-a-second-step",
    ),
    pytest.param(
        {"challengeresponseauthentication": ["yes"]},
        ["keyboard-interactive"],
        id="old-openssh-name",
    ),
]


@pytest.mark.parametrize(("effective", "expected"), EFFECTIVE)
def test_password_logins(effective: dict[str, list[str]], expected: list[str]) -> None:
    from marun.mpi.ssh_keys import password_logins

    assert password_logins(effective) == expected


# -- the real sshd -T, and sshd_bootstrap as the plan runs it ------------------------------------


def _in_private_run(
    argv: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `argv` (as root: with an empty /run of its own, so sshd's privilege-separation
    directory is missing there, as in a fresh container) and report whether /run/sshd exists
    after it on the last line of stdout."""
    if SSHD is None:
        pytest.skip("openssh-server is not installed")
    report = '; rc=$?; [ -d /run/sshd ] && echo "/run/sshd: yes" || echo "/run/sshd: no"; exit $rc'
    if os.getuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("running as root without unshare")
        script = 'mount -t tmpfs -o mode=755 marun-test-run /run && "$@"' + report
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]
    else:
        cmd = ["sh", "-c", '"$@"' + report, "sh", *argv]
    return subprocess.run(
        cmd, env=clean_env(env), capture_output=True, text=True, timeout=60, check=False
    )


def _render(run: Path, first_lines: str = "") -> Path:
    """marun's own sshd config for a run directory `run`, with `first_lines` in front (sshd
    takes the first value it reads for each setting)."""
    import pwd

    from marun.mpi.run_dir import AUTHORIZED_KEYS, HOST_KEY, PID_FILE, SSHD_CONFIG
    from marun.mpi.sshd_config import render_sshd_config

    run.mkdir(parents=True, exist_ok=True)
    text = render_sshd_config(
        port=36666,
        host_key=str(run / HOST_KEY),
        pid_file=str(run / PID_FILE),
        authorized_keys=(str(run / AUTHORIZED_KEYS),),
        hosts=1,
        user=pwd.getpwuid(os.getuid()).pw_name,
    )
    config = run / SSHD_CONFIG
    config.write_text(first_lines + text)
    return config


REFUSED = [
    pytest.param("", None, id="marun-template"),
    pytest.param("PasswordAuthentication yes\n", None, id="password-but-keys-required"),
    pytest.param(
        "PasswordAuthentication yes\nAuthenticationMethods any\n", "password", id="password"
    ),
    pytest.param(
        "KbdInteractiveAuthentication yes\nAuthenticationMethods any\n",
        "keyboard-interactive",
        id="kbd-interactive",
    ),
]


@pytest.mark.e2e
@pytest.mark.parametrize(("first_lines", "accepted"), REFUSED)
def test_bootstrap_prepares_sshd_or_refuses_passwords(
    tmp_path: Path, first_lines: str, accepted: str | None
) -> None:
    """`python -m marun.mpi.sshd_bootstrap` as the plan runs it, up to the exec: here of `sshd -t`
    (check the config and exit) instead of `sshd -D` (serve)."""
    run = tmp_path / "run"
    config = _render(run, first_lines)
    run.chmod(0o755)
    res = _in_private_run(
        [
            *(sys.executable, "-m", "marun.mpi.sshd_bootstrap", "--run-dir", str(run)),
            *("--new-identity", str(run / "id_ed25519"), "--"),
            *(str(SSHD), "-t", "-f", str(config)),
        ]
    )
    made_privsep = os.getuid() == 0  # as root marun creates it; a user's sshd does without
    if accepted is None:
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines()[-1] == f"/run/sshd: {'yes' if made_privsep else 'no'}"
        assert _mode(run) == 0o700
        assert _mode(run / "ssh_host_ed25519_key") == 0o600
        public = (run / "id_ed25519.pub").read_text().strip()
        assert (run / "authorized_keys").read_text() == public + "\n"
        return
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1, res.stderr
    assert f"sshd config {config}: sshd -T accepts {accepted} logins" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.e2e
def test_bootstrap_reports_a_config_sshd_rejects(tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = _render(run, "NoSuchSetting yes\n")
    res = _in_private_run(
        [
            *(sys.executable, "-m", "marun.mpi.sshd_bootstrap", "--run-dir", str(run), "--"),
            *(str(SSHD), "-D", "-e", "-f", str(config)),
        ]
    )
    assert res.returncode == 1
    assert f"marun: error: sshd rejects {config}:" in res.stderr
    assert "Bad configuration options" in res.stderr or "bad configuration" in res.stderr.lower()


def test_bootstrap_needs_a_command() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "marun.mpi.sshd_bootstrap", "--run-dir", "/nonexistent"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 1
    assert "expected `python -m marun.mpi.sshd_bootstrap --run-dir DIR" in res.stderr
