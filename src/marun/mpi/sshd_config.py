"""The sshd configuration MPI mode starts on every node, rendered from `templates/sshd_config`.

The templates live inside this subpackage (`marun/mpi/templates/`), so a checkout and an installed
wheel find them the same way. The template holds the fixed policy and explains each choice;
`render_sshd_config` fills in the per-job paths.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from marun.errors import MarunError, bad_value

TEMPLATE = "sshd_config"
# Variables an ssh session needs to run orted and marun as the container would (see the template).
SESSION_ENV = ("PATH", "LD_LIBRARY_PATH", "OPAL_PREFIX", "TMPDIR", "PYTHONPATH")
# OpenSSH's defaults are 10:30:100 unauthenticated connections and 10 sessions per connection.
MIN_STARTUPS = 100
MAX_SESSIONS = 100
HEADER = "# Written by marun from its templates/sshd_config, where each setting is explained.\n"

# A word sshd reads as is; anything else is double-quoted (sshd's argv_split rules).
_PLAIN_WORD = re.compile(r"[^\s\"'\\#]+")


def read_template(name: str) -> str:
    """A template's text, from the package (`marun/mpi/templates/`)."""
    from importlib.resources import files

    packaged = files("marun.mpi") / "templates" / name
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    raise MarunError(
        f"template {name!r} is missing from the marun installation (looked in marun/mpi/templates):"
        " reinstall marun"
    )


def quote_word(word: str) -> str:
    """`word` as one sshd_config word: bare when it can be, else double-quoted and escaped."""
    if _PLAIN_WORD.fullmatch(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def session_env(env: Mapping[str, str]) -> dict[str, str]:
    """The SESSION_ENV variables set in `env`, for sshd's SetEnv."""
    found = {name: env[name] for name in SESSION_ENV if env.get(name)}
    for name, value in found.items():
        if "\n" in value or "\r" in value or "\0" in value:
            raise bad_value(name, value, "a value on one line (it goes into sshd_config)")
    return found


def max_startups(hosts: int) -> str:
    """sshd's MaxStartups start:rate:full, so that every node of the job can be mid-handshake
    at once without one being dropped."""
    start = max(MIN_STARTUPS, hosts)
    return f"{start}:30:{2 * start}"


def render_sshd_config(
    *,
    port: int,
    host_key: str,
    pid_file: str,
    authorized_keys: Sequence[str],
    hosts: int,
    user: str | None = None,
    listen_address: str | None = None,
    set_env: Mapping[str, str] | None = None,
) -> str:
    from string import Template

    from marun.inputs.hosts import is_ip
    from marun.inputs.numbers import check_port_number

    check_port_number("sshd_port", port)
    if listen_address is not None and not is_ip(listen_address):
        raise bad_value("sshd listen address", listen_address, "an IP address")
    env_words = [quote_word(f"{k}={v}") for k, v in (set_env or {}).items()]
    values = {
        "port": str(port),
        "listen_address": (
            f"ListenAddress {listen_address}"
            if listen_address
            else "# ListenAddress: every address of this container's own network namespace"
        ),
        "host_key": quote_word(host_key),
        "pid_file": quote_word(pid_file),
        "authorized_keys": " ".join(quote_word(p) for p in authorized_keys),
        "allow_users": (
            f"AllowUsers {quote_word(user)}"
            if user
            else "# AllowUsers: this uid has no passwd entry"
        ),
        "max_startups": max_startups(hosts),
        "max_sessions": str(MAX_SESSIONS),
        "set_env": ("SetEnv " + " ".join(env_words)) if env_words else "# SetEnv: none to carry",
    }
    return HEADER + Template(settings_lines(read_template(TEMPLATE))).substitute(values)


def settings_lines(template: str) -> str:
    """The template without its comments (they explain the choices; the rendered file is read
    on a node and shown by `marun plan`, where the settings alone are what matters)."""
    kept = [line for line in template.splitlines() if line.strip() and not line.startswith("#")]
    return "\n".join(kept) + "\n"
