"""The keys MPI mode's ssh needs, and the checks that keep its sshd key-only.

- Client key: the platform's (Volcano's ssh plugin mounts `id_rsa`, `id_rsa.pub`,
  `authorized_keys` and `config` under `/root/.ssh` or a configured directory), else a per-job
  key generated on a single-node job. ssh silently skips a private key that others may read when
  it belongs to the user ("UNPROTECTED PRIVATE KEY FILE", then "Permission denied"): that is
  checked up front, with the fix in the message.
- Host key: generated per container into the run directory. An image's own host keys are not
  used: they are baked into the image (the same in every container), readable by root only, and
  the job's clients do not check host keys anyway (the job's key is what authenticates).
- `sshd -T` prints the configuration sshd would really run with (defaults, the file, and any
  `Include`): marun refuses to start an sshd that would accept a password or keyboard-interactive
  login, whatever the reason.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Mapping, Sequence

from marun._files import atomic_write, find_executable
from marun.errors import InputError, MarunError, bad_value

TOOL_DIRS = ("/usr/bin", "/usr/sbin")  # where Debian puts ssh, ssh-keygen and sshd
KEYGEN_TIMEOUT = 30.0
SSHD_T_TIMEOUT = 30.0
# sshd as root dies without its privilege-separation directory (Debian: /run/sshd, made by
# systemd at boot, so missing in a container); it names the directory when it does.
_PRIVSEP = re.compile(r"Missing privilege separation directory: (\S+)")
# sshd -T settings that enable a login without the job's key, and the method each enables
# (challengeresponseauthentication: OpenSSH < 8.7's name for keyboard-interactive).
_NON_KEY_METHODS = (
    ("passwordauthentication", "password"),
    ("kbdinteractiveauthentication", "keyboard-interactive"),
    ("challengeresponseauthentication", "keyboard-interactive"),
)


def find_tool(name: str, search_path: str | None = None) -> str:
    found = find_executable(name, TOOL_DIRS, search_path)
    if found is None:
        raise MarunError(f"{name} not found on PATH: the image needs openssh-client")
    return found


PRIVATE_KEY_EXPECTED = (
    "0600: ssh ignores a private key that others can read ('UNPROTECTED PRIVATE KEY FILE'); "
    "chmod 600 it, or mount the secret with defaultMode 0600"
)


def key_mode_problem(st: os.stat_result, uid: int, private: bool) -> str | None:
    """What ssh or sshd (StrictModes) would refuse about a key file or directory of `uid`'s,
    or None. ssh's own rule for a private key: one that is `uid`'s must be readable by `uid`
    alone (a key of someone else's, such as root's secret mounted 0644 for a user, it takes).
    For everything: owned by `uid` or root, and writable by nobody else."""
    mode = stat.S_IMODE(st.st_mode)
    if private and st.st_uid == uid and mode & 0o077:
        return f"mode {mode:04o}: expected {PRIVATE_KEY_EXPECTED}"
    if st.st_uid not in (uid, 0):
        return f"owned by uid {st.st_uid}: expected uid {uid} or root"
    if mode & 0o022:
        return f"mode {mode:04o}: writable by group or others, expected not"
    return None


def check_private_key(path: str, uid: int) -> None:
    """The client key must be readable, and private when it is ours (ssh's own rule)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise bad_value("ssh key file", path, f"a readable file ({exc.strerror})") from None
    if not os.access(path, os.R_OK):
        raise bad_value("ssh key file", path, f"a file uid {uid} can read (permission denied)")
    if st.st_uid == uid and key_mode_problem(st, uid, private=True):
        raise bad_value(f"mode of {path}", f"{stat.S_IMODE(st.st_mode):04o}", PRIVATE_KEY_EXPECTED)


def check_readable(path: str, what: str) -> None:
    if not os.path.isfile(path):
        raise bad_value(what, path, "an existing file")
    if not os.access(path, os.R_OK):
        raise bad_value(what, path, "a file this user can read (permission denied)")


def _run_tool(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run an OpenSSH tool with no input, its output captured; the caller judges the result."""
    return subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
    )


def generate_key(path: str, comment: str) -> bool:
    """Create an ed25519 key pair at `path` (and `path`.pub) unless one is there; True when it
    was created. A key left by an earlier start of this container is reused."""
    if os.path.exists(path):
        if not os.path.exists(path + ".pub"):
            raise MarunError(f"{path} exists without {path}.pub: remove it and start again")
        return False
    keygen = find_tool("ssh-keygen")
    argv = [keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path]
    try:
        res = _run_tool(argv, KEYGEN_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MarunError(f"ssh-keygen could not create {path}: {exc}") from None
    if res.returncode != 0:
        raise MarunError(f"ssh-keygen could not create {path}: {_last_line(res.stderr)}")
    return True


def write_authorized_keys(public_keys: Sequence[str], path: str) -> None:
    """Write `path` (mode 0600, atomically) with the keys of the given .pub files."""
    lines: list[str] = []
    for pub in public_keys:
        try:
            with open(pub, encoding="utf-8") as fh:
                lines += [line.strip() for line in fh if line.strip()]
        except OSError as exc:
            raise bad_value("public key file", pub, f"a readable file ({exc.strerror})") from None
    atomic_write(path, "".join(line + "\n" for line in lines), 0o600)


def effective_sshd_config(sshd: str, config: str) -> dict[str, list[str]]:
    """`sshd -T -f config`: every setting sshd would run with (lower-case keyword -> the value
    of each line that sets it). As root, a missing privilege-separation directory is created."""
    argv = [sshd, "-T", "-f", config]
    for _ in range(2):
        try:
            res = _run_tool(argv, SSHD_T_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MarunError(f"`{' '.join(argv)}` failed: {exc}") from None
        missing = _PRIVSEP.search(res.stderr)
        if res.returncode == 0 or missing is None or os.geteuid() != 0:
            break
        os.makedirs(missing.group(1), mode=0o755, exist_ok=True)
    if res.returncode != 0:
        raise MarunError(f"sshd rejects {config}: {_last_line(res.stderr)}")
    settings: dict[str, list[str]] = {}
    for line in res.stdout.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            settings.setdefault(key.lower(), []).append(value.strip())
    return settings


def password_logins(effective: Mapping[str, Sequence[str]]) -> list[str]:
    """The login methods other than keys that sshd would accept, by `sshd -T`'s output: a method
    counts when it is enabled and AuthenticationMethods (`any` by default) lets it finish a login
    or part of one."""
    enabled = {
        method
        for setting, method in _NON_KEY_METHODS
        if any(value.lower() == "yes" for value in effective.get(setting, ()))
    }
    listed: set[str] = set()
    for value in effective.get("authenticationmethods", ("any",)):
        for chain in value.lower().split():
            for step in chain.split(","):
                listed.add(step.split(":", 1)[0])
    allowed = enabled if "any" in listed else enabled & listed
    return sorted(allowed)


def refuse_password_logins(sshd: str, config: str) -> None:
    allowed = password_logins(effective_sshd_config(sshd, config))
    if allowed:
        raise InputError(
            f"sshd config {config}: sshd -T accepts {' and '.join(allowed)} logins: expected "
            "public keys only (marun will not start an sshd that accepts passwords)"
        )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"
