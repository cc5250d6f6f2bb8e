"""TensorFlow host lists as the platform appends them (`--ps_hosts`, `--worker_hosts`).

The platform writes `[xx-ps-0.xx:PORT,xx-ps-1.xx:PORT]`; the same list also arrives without brackets
(`a:1,b:2`), with quotes around the whole or each entry, with spaces after the commas, or as a
JSON list (`["a:1", "b:2"]`). All of them come out as a tuple of `HOST:PORT` strings, the form
TF_CONFIG's cluster wants.

The platform makes the appended lists from two variables it also sets in the container,
`--ps_hosts <TF_PS_HOSTS> --worker_hosts <TF_WORKER_HOSTS>` (docs/platform-contract.md):
`HOSTS_VARS` names them, by flag.
"""

from __future__ import annotations

import re

from marun.errors import bad_value
from marun.inputs.numbers import PORT_MAX, PORT_MIN, is_digits, is_port

# A DNS name or IPv4 address, or an IPv6 address in brackets (`[::1]:5000`).
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\]")
_QUOTES = "\"'"
HOSTS_VARS = {"ps_hosts": "TF_PS_HOSTS", "worker_hosts": "TF_WORKER_HOSTS"}
EXPECTED = (
    f"a list of HOST:PORT like [job-ps-0.job:5000,job-ps-1.job:5001], port {PORT_MIN}-{PORT_MAX}"
)


def _unquote(text: str) -> str:
    text = text.strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in _QUOTES:
        text = text[1:-1].strip()
    return text


def split_address(address: str) -> tuple[str, int] | None:
    """`HOST:PORT` into its parts, or None when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not is_digits(port) or len(port) > 5:
        return None
    number = int(port)
    return (host, number) if is_port(number) else None


def moved(address: str, host: str) -> str | None:
    """`HOST:PORT` `address` with `host` in place of its host, the port kept (hot spares: a
    spare takes a place's port at its own host); None when `address` is not HOST:PORT."""
    parts = split_address(address)
    return None if parts is None else f"{host}:{parts[1]}"


def parse_host_list(flag: str, raw: str) -> tuple[str, ...]:
    """The `HOST:PORT` entries of `raw`; `flag` names the value in the error message."""
    text = _unquote(raw)
    # A whole-list bracket, not the bracket of a lone IPv6 entry (`[::1]:5000`).
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    entries = [_unquote(part) for part in text.split(",")]
    if entries == [""]:
        raise bad_value(flag, raw, f"{EXPECTED}; it is empty")
    for entry in entries:
        if split_address(entry) is None:
            raise bad_value(flag, raw, f"{EXPECTED}; {entry!r} is not HOST:PORT")
    return tuple(entries)
