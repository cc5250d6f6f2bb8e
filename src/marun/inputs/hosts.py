"""The job's node host names, and resolving them to addresses with a bounded wait.

Order of sources (docs/platform-contract.md): `VC_<TASK>_HOSTS` (Volcano's svc plugin; wins
where it disagrees with the pattern), the file `/etc/volcano/<task>.host`, then the platform's
pattern `${MA_VJ_NAME}-${MA_TASK_NAME}-${i}.${MA_VJ_NAME}`.

Every name is checked before it goes anywhere (an env value, an ssh or mpirun argument, a
lookup): a host name (RFC 1123 labels; `_` is let through, as some resolvers do) or an IP
address. A name such as `-oProxyCommand=x` would be an option to ssh, `a;b` or a newline would
break a generated file, and `a..b` makes the resolver's IDNA codec raise instead of answer.
"""

from __future__ import annotations

import ipaddress
import os
import re

from marun.errors import InputError, bad_value
from marun.inputs.injected import TEMPLATE_HOSTNAME_HINT, Platform, volcano_task_key
from marun.inputs.textfile import read_input_text

_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
HOST_EXPECTED = "a host name (letters, digits, '-', '.'; labels of 1-63) or an IP address"


def is_host_name(text: str) -> bool:
    """An RFC 1123 host name (a trailing dot allowed), at most 253 characters."""
    name = text[:-1] if text.endswith(".") else text
    if not name or len(name) > 253:
        return False
    return all(_LABEL.fullmatch(label) for label in name.split("."))


def is_host(text: str) -> bool:
    """A host name or an IP address (what may go where a host is named: MASTER_ADDR, a
    hostfile, a TF_CONFIG)."""
    return is_ip(text) or is_host_name(text)


def check_host(what: str, text: str) -> str:
    """`text` when it is a host name or an IP address; one line of bad input otherwise."""
    if not is_host(text):
        raise bad_value(what, text, HOST_EXPECTED)
    return text


def node_hosts(platform: Platform) -> tuple[str, ...]:
    """One host name (or address) per node, index i at position i."""
    count_var, count = platform.given_num_hosts() or ("MA_NUM_HOSTS", 1)
    task = platform.task_name()
    var = f"VC_{volcano_task_key(task).upper()}_HOSTS"
    raw = platform.env.get(var)
    source = var
    names: list[str]
    if raw is not None:
        names = [h.strip() for h in raw.split(",") if h.strip()]
        if not names:
            raise bad_value(var, raw, "a comma-separated list of host names")
    else:
        path = os.path.join(platform.settings.volcano_dir, f"{volcano_task_key(task)}.host")
        if os.path.isfile(path):
            text = read_input_text(path, "Volcano host file", "one host name a line")
            names = [h.strip() for h in text.splitlines() if h.strip()]
            source = path
            if not names:
                raise InputError(f"{path}: empty; expected one host name a line")
        elif count == 1:
            return (platform.hostname,)
        else:
            job = platform.job_name()
            if not job:
                raise InputError(
                    f"{count_var}={count} but neither {var}, {path} nor MA_VJ_NAME is set: "
                    "expected one of them to name the nodes"
                )
            pattern = tuple(f"{job}-{task}-{i}.{job}" for i in range(count))
            for name in pattern[:1]:  # the others differ only in the index
                check_host("MA_VJ_NAME/MA_TASK_NAME host name", name)
            return pattern
    if len(names) != count:
        shown = ",".join(names[:8]) + (",..." if len(names) > 8 else "")
        why = f"; {TEMPLATE_HOSTNAME_HINT}" if len(names) == 1 else ""
        raise InputError(
            f"{source} lists {len(names)} host(s) ({shown}): expected {count_var}={count}{why}"
        )
    for name in names:
        check_host(f"{source} entry", name)
    return tuple(names)


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_ipv4(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 4
    except ValueError:
        return False


class ResolveError(InputError):
    pass


def lookup_ipv4(name: str) -> str:
    """One lookup of `name`'s IPv4 address. OSError when the resolver has no answer (yet);
    ResolveError (bad input, not worth a retry) when `name` cannot be a host name at all."""
    if is_ipv4(name):
        return name
    if not is_host_name(name):
        raise ResolveError(f"host {name!r}: expected {HOST_EXPECTED}")
    import socket

    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except UnicodeError:  # the IDNA codec refuses the name (an empty or over-long label)
        raise ResolveError(f"host {name!r}: expected {HOST_EXPECTED}") from None
    return str(infos[0][4][0])


def resolve_ipv4(name: str, timeout: float) -> str:
    """The IPv4 address of `name`, retrying with backoff for up to `timeout` seconds: DNS for
    a pod's name can appear some time after the pod starts (Volcano #1972, #452)."""
    try:  # the usual case, a name that resolves: no retry machinery on the path to exec
        return lookup_ipv4(name)  # (tenacity: 10 ms of imports)
    except OSError:
        pass  # not yet: the loop below looks again at once, then with backoff
    from tenacity import (
        retry,
        retry_if_exception_type,
        stop_after_delay,
        wait_exponential,
    )

    @retry(
        retry=retry_if_exception_type(OSError),
        stop=stop_after_delay(timeout),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        reraise=True,
    )
    def lookup() -> str:
        return lookup_ipv4(name)

    try:
        return lookup()
    except OSError as exc:
        raise ResolveError(
            f"host {name!r} did not resolve to an IPv4 address within {timeout:g}s "
            f"({exc.strerror or exc})"
        ) from None
