"""MindSpore's secure channel: TLS between the dynamic cluster's scheduler and workers.

MindSpore reads its TLS settings from a JSON file named by `set_ps_context(config_file_path=...,
enable_ssl=True, client_password=..., server_password=...)`, called before `init()`. With
`ms_ssl` on, marun checks every certificate before anything starts (exists, readable, the p12
passwords open the p12 files, none expired; a warning when one expires within
`ms_cert_expire_warning_days`), plans that JSON file (mode 0600) in the run directory, and hands
the script its path and the two passwords through the environment:

    MARUN_MS_TLS_CONFIG        the config file's path
    MARUN_MS_CLIENT_PASSWORD   the client p12's password
    MARUN_MS_SERVER_PASSWORD   the server p12's password

The passwords come from those same variables in marun's environment, else from
`ms_client_password_file` / `ms_server_password_file` (first line, newline stripped); never from
the command line. Their names hold PASSWORD, so every output of marun masks them. A password
file that its group or others may read is a plan note and a logged warning
(`password_file_readable_by_others`), not a refusal: Kubernetes mounts a secret 0644 unless told
otherwise.

A certificate within the warning window is a plan note and a logged warning
(`certificate_expires_soon`). Expiry is read with the `openssl` command (bounded by a timeout);
where it is missing, a plan note says that expiry was not checked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from marun.errors import InputError, bad_value
from marun.inputs.injected import Platform
from marun.inputs.records import dataclass, replace
from marun.plan.launch_plan import FileSpec, NodePlan

CONFIG_VAR = "MARUN_MS_TLS_CONFIG"
CLIENT_PASSWORD_VAR = "MARUN_MS_CLIENT_PASSWORD"
SERVER_PASSWORD_VAR = "MARUN_MS_SERVER_PASSWORD"
CONFIG_NAME = "mindspore_tls.json"
# The suites MindSpore's secure channel accepts (its `kCiphers`): `init()` splits cipher_list at
# ':' and fails with "The cipher is wrong" on any entry not named exactly so (DHE suites,
# OpenSSL keywords such as `!aNULL`, a typo such as `ECDHE-R SA-...`).
MS_CIPHERS = (
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "ECDHE-PSK-CHACHA20-POLY1305",
    "ECDHE-ECDSA-AES128-CCM",
    "ECDHE-ECDSA-AES256-CCM",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
)
OPENSSL_TIMEOUT = 10.0  # seconds per openssl call: a local file read, never a network wait
DAY = 86400.0


@dataclass(frozen=True)
class Tls:
    """What the plan adds when ms_ssl is on: the config file and the script's variables."""

    file: FileSpec
    env: Mapping[str, str]
    notes: tuple[str, ...]


def _path(platform: Platform, setting: str, value: str | None) -> str:
    if not value:
        raise bad_value(setting, value, "a certificate file (ms_ssl is on)")
    path = os.path.normpath(os.path.join(platform.cwd, value))
    _check_readable(setting, value, path)
    return path


def _check_readable(setting: str, value: str, path: str) -> None:
    if not os.path.isfile(path):
        raise bad_value(setting, value, "an existing file")
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise bad_value(setting, value, f"a file marun can read ({exc.strerror})") from None


def _password(
    platform: Platform, var: str, setting: str, file: str | None
) -> tuple[str, str | None]:
    """The password, and a note when the file it came from is open to other users."""
    value = platform.env.get(var)
    if value is not None:
        return value, None
    if not file:
        raise InputError(
            f"ms_ssl: no {var.split('_MS_')[1].lower().replace('_', ' ')}: expected {var} in "
            f"the environment or the setting {setting} (a file holding it)"
        )
    path = os.path.normpath(os.path.join(platform.cwd, file))
    _check_readable(setting, file, path)
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline()
            mode = os.fstat(fh.fileno()).st_mode  # of the file read, not of the path later
    except UnicodeDecodeError:
        raise bad_value(setting, file, "a UTF-8 text file holding the password") from None
    return first.rstrip("\r\n"), _open_to_others(setting, path, mode)


def _open_to_others(setting: str, path: str, st_mode: int) -> str | None:
    """A note when others than the owner may read the password file. Not a refusal, as ssh's
    is for a private key: Kubernetes mounts a secret 0644 unless its defaultMode says otherwise,
    and in a container the other users are usually nobody; but the user should know."""
    import stat

    mode = stat.S_IMODE(st_mode)
    if not mode & 0o044:
        return None
    who = {0o044: "group and others", 0o004: "others", 0o040: "its group"}[mode & 0o044]
    from marun.log import get_logger  # lazy: only when there is something to say

    # A run shows no plan notes: the warning must reach the job's log as well.
    get_logger().warning("password_file_readable_by_others", setting=setting, path=path,
                         mode=f"{mode:04o}")  # fmt: skip
    return (
        f"ms_ssl: {setting} {path} is readable by {who} (mode {mode:04o}): a password file "
        "should be 0600 or 0400 (Kubernetes: the secret's defaultMode: 0400)"
    )


def _not_after(argv: list[str], stdin: bytes | None, env: Mapping[str, str]) -> float | None:
    """Run openssl and read `notAfter=...` from its output; None when openssl fails."""
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            timeout=OPENSSL_TIMEOUT,
            env=dict(env),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    for line in done.stdout.decode("ascii", "replace").splitlines():
        if line.startswith("notAfter="):
            text = line[len("notAfter=") :].replace(" GMT", " +0000")
            try:
                return parsedate_to_datetime(text).timestamp()
            except (TypeError, ValueError):
                return None
    return None


def _pem_not_after(openssl: str, setting: str, path: str) -> float:
    when = _not_after([openssl, "x509", "-enddate", "-noout", "-in", path], None, os.environ)
    if when is None:
        raise bad_value(setting, path, "a PEM certificate (openssl x509 cannot read it)")
    return when


def _p12_not_after(openssl: str, setting: str, path: str, password: str) -> float:
    """Open the p12 with its password (openssl reads it from the environment, never argv), then
    read the end date of its own certificate."""
    env = {**os.environ, "MARUN_P12_PASS": password}
    dump = [openssl, "pkcs12", "-in", path, "-nokeys", "-clcerts", "-passin", "env:MARUN_P12_PASS"]
    out = None
    # OpenSSL 3 opens a p12 made with the old RC2/3DES algorithms only with -legacy: try both.
    for extra in ((), ("-legacy",)):
        try:
            done = subprocess.run(
                [*dump, *extra], check=False, capture_output=True, timeout=OPENSSL_TIMEOUT, env=env
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and b"CERTIFICATE" in done.stdout:
            out = done.stdout
            break
    if out is None:
        raise bad_value(
            setting, path, "a PKCS#12 file that its password opens (openssl pkcs12 failed)"
        )
    when = _not_after([openssl, "x509", "-enddate", "-noout"], out, os.environ)
    if when is None:
        raise bad_value(setting, path, "a PKCS#12 file holding a certificate")
    return when


def _expiry_notes(
    certs: list[tuple[str, str, float]], warn_days: int, now: float
) -> tuple[str, ...]:
    notes = []
    for setting, path, not_after in certs:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(not_after))
        if not_after <= now:
            raise InputError(f"{setting}: certificate {path} expired on {stamp}: renew it")
        days = (not_after - now) / DAY
        if days < warn_days:
            from marun.log import get_logger  # lazy: only when there is something to say

            # A run shows no plan notes: the warning must reach the job's log as well.
            get_logger().warning(
                "certificate_expires_soon", setting=setting, path=path, not_after=stamp,
                days=round(days), warning_days=warn_days,
            )  # fmt: skip
            notes.append(
                f"{setting}: certificate {path} expires on {stamp}, in {days:.0f} day(s) "
                f"(within ms_cert_expire_warning_days={warn_days})"
            )
    return tuple(notes)


def cipher_notes(cipher_list: str) -> tuple[str, ...]:
    """A note naming the entries of `cipher_list` MindSpore refuses, or ()."""
    refused = [entry for entry in cipher_list.split(":") if entry not in MS_CIPHERS]
    if not refused:
        return ()
    shown = ", ".join(repr(entry) for entry in refused[:4])
    more = f" and {len(refused) - 4} more" if len(refused) > 4 else ""
    return (
        f"ms_cipher_list: MindSpore refuses {shown}{more} (init() fails with 'The cipher is "
        "wrong' on any suite it does not list, DHE ones included); it takes, colon-separated: "
        + ":".join(MS_CIPHERS),
    )


def config_path(platform: Platform) -> str:
    return os.path.join(platform.run_dir(), CONFIG_NAME)


def plan_tls(platform: Platform, now: float | None = None) -> Tls | None:
    """The secure channel's file and variables, or None when ms_ssl is off. Bad input raises."""
    s = platform.settings
    if not s.ms_ssl:
        return None
    if s.ms_cert_expire_warning_days < 0:
        raise bad_value("ms_cert_expire_warning_days", s.ms_cert_expire_warning_days, "days >= 0")
    if not s.ms_cipher_list.strip():
        raise bad_value("ms_cipher_list", s.ms_cipher_list, "an OpenSSL cipher list")
    server = _path(platform, "ms_server_cert", s.ms_server_cert)
    client = _path(platform, "ms_client_cert", s.ms_client_cert)
    ca = _path(platform, "ms_ca_cert", s.ms_ca_cert)
    crl = _path(platform, "ms_crl", s.ms_crl) if s.ms_crl else ""
    client_pw, client_note = _password(
        platform, CLIENT_PASSWORD_VAR, "ms_client_password_file", s.ms_client_password_file
    )
    server_pw, server_note = _password(
        platform, SERVER_PASSWORD_VAR, "ms_server_password_file", s.ms_server_password_file
    )
    open_files = tuple(note for note in (client_note, server_note) if note)

    notes: tuple[str, ...]
    openssl = shutil.which("openssl")
    if openssl is None:
        notes = ("ms_ssl: openssl is not on PATH: certificate expiry was not checked",)
    else:
        certs = [
            ("ms_ca_cert", ca, _pem_not_after(openssl, "ms_ca_cert", ca)),
            (
                "ms_server_cert",
                server,
                _p12_not_after(openssl, "ms_server_cert", server, server_pw),
            ),
            (
                "ms_client_cert",
                client,
                _p12_not_after(openssl, "ms_client_cert", client, client_pw),
            ),
        ]
        notes = _expiry_notes(
            certs, s.ms_cert_expire_warning_days, time.time() if now is None else now
        )
    config = {
        "server_cert_path": server,
        "crl_path": crl,
        "client_cert_path": client,
        "ca_cert_path": ca,
        "cipher_list": s.ms_cipher_list,
        "cert_expire_warning_time_in_day": s.ms_cert_expire_warning_days,
    }
    path = config_path(platform)
    spec = FileSpec(path=path, content=json.dumps(config, indent=2) + "\n", mode=0o600)
    env = {CONFIG_VAR: path, CLIENT_PASSWORD_VAR: client_pw, SERVER_PASSWORD_VAR: server_pw}
    return Tls(file=spec, env=env, notes=open_files + cipher_notes(s.ms_cipher_list) + notes)


def with_tls(node: NodePlan, tls: Tls | None) -> NodePlan:
    """The node writes the config file and every one of its processes gets the variables."""
    if tls is None:
        return node
    processes = tuple(replace(p, env={**p.env, **tls.env}) for p in node.processes)
    return replace(node, files=(*node.files, tls.file), processes=processes)
