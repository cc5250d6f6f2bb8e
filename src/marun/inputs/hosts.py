"""The job's node host names, and resolving them to addresses with a bounded wait.

Order of sources (PLATFORM.md): `VC_<TASK>_HOSTS` (Volcano's svc plugin; wins where it disagrees
with the pattern), the file `/etc/volcano/<task>.host`, then the platform's pattern
`${MA_VJ_NAME}-${MA_TASK_NAME}-${i}.${MA_VJ_NAME}`.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from marun.errors import InputError, bad_value
from marun.inputs.injected import Platform


def _task_key(task: str) -> str:
    # Volcano writes `-` in a task name as `_` in both the variable and the file name.
    return task.replace("-", "_")


def node_hosts(platform: Platform) -> tuple[str, ...]:
    """One host name (or address) per node, index i at position i."""
    count = platform.num_hosts()
    task = platform.task_name()
    var = f"VC_{_task_key(task).upper()}_HOSTS"
    raw = platform.env.get(var)
    source = var
    names: list[str]
    if raw is not None:
        names = [h.strip() for h in raw.split(",") if h.strip()]
        if not names:
            raise bad_value(var, raw, "a comma-separated list of host names")
    else:
        path = Path(platform.settings.volcano_dir, f"{_task_key(task)}.host")
        if path.is_file():
            names = [h.strip() for h in path.read_text().splitlines() if h.strip()]
            source = str(path)
            if not names:
                raise InputError(f"{path}: empty; expected one host name a line")
        elif count == 1:
            return (platform.hostname,)
        else:
            job = platform.job_name()
            if not job:
                raise InputError(
                    f"MA_NUM_HOSTS={count} but neither {var}, {path} nor MA_VJ_NAME is set: "
                    "expected one of them to name the nodes"
                )
            return tuple(f"{job}-{task}-{i}.{job}" for i in range(count))
    if len(names) != count:
        raise InputError(
            f"{source} lists {len(names)} host(s) ({','.join(names)}): "
            f"expected MA_NUM_HOSTS={count}"
        )
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


def resolve_ipv4(name: str, timeout: float) -> str:
    """The IPv4 address of `name`, retrying with backoff for up to `timeout` seconds: DNS for
    a pod's name can appear some time after the pod starts (Volcano #1972, #452)."""
    if is_ipv4(name):
        return name
    import socket

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
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
        return str(infos[0][4][0])

    try:
        return lookup()
    except OSError as exc:
        raise ResolveError(
            f"host {name!r} did not resolve to an IPv4 address within {timeout:g}s "
            f"({exc.strerror or exc})"
        ) from None
