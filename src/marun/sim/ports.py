"""The ports a simulated job binds (rendezvous, scheduler, TF servers, the job's coordination):
chosen free on this machine here and bound later by the nodes, so one that something else binds
in between is lost to the job (`address already in use`, or a rank that talks to a stranger).

bind(0) would give one from the kernel's ephemeral range, where any outgoing connection in
between (the nodes' own, to the job port) may take it as its local end; one from below that range
is taken only by a listener. Two simulations (or test runs) on one machine can still choose the
same port between one's choice and its bind: `MARUN_SIM_PORTS=LOW-HIGH` gives each a range of
its own.
"""

from __future__ import annotations

import os
import random
import re
import socket
from collections.abc import Mapping

from marun.errors import bad_value
from marun.inputs.numbers import PORT_MAX

PORTS_VAR = "MARUN_SIM_PORTS"
LOW_PORT = 10000
_MIN_SPAN = 16  # a job of a few nodes binds a few ports each
_TRIES = 100
_RANGE = re.compile(r"(\d{1,5})-(\d{1,5})")


def ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def port_range(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """[low, high) from MARUN_SIM_PORTS (both ends included as written), or None when unset:
    then below the ephemeral range."""
    raw = (os.environ if env is None else env).get(PORTS_VAR, "").strip()
    if not raw:
        return None
    match = _RANGE.fullmatch(raw)
    low, high = (int(match[1]), int(match[2])) if match else (0, 0)
    if not (low >= 1024 and high <= PORT_MAX and high - low + 1 >= _MIN_SPAN):
        raise bad_value(
            PORTS_VAR,
            raw,
            f"LOW-HIGH, ports from 1024 to {PORT_MAX}, {_MIN_SPAN} or more of them "
            "(e.g. 20000-24999)",
        )
    return low, high + 1


def free_port(host: str = "127.0.0.1", env: Mapping[str, str] | None = None) -> int:
    """A port free on `host` now ("": every address): from MARUN_SIM_PORTS when set (none free
    there is bad input), else below the kernel's ephemeral range where there is room (else any).
    The one chooser of a port that a marun binds later (simulate, the tests, the benches)."""
    chosen = port_range(env)
    if chosen is None:  # random tries below the ephemeral range, where it leaves 1000 or more
        low, top = LOW_PORT, ephemeral_start()
        ports = [random.randrange(low, top) for _ in range(_TRIES)] if top - low >= 1000 else []
    else:  # every port of a small range, in random order; as many of a large one
        low, top = chosen
        ports = random.sample(range(low, top), min(top - low, 4 * _TRIES))
    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    if chosen is not None:
        raise bad_value(
            PORTS_VAR, f"{low}-{top - 1}", f"a range with a free port ({len(ports)} tried)"
        )
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
