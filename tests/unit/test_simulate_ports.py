"""The ports `marun simulate` hands its nodes are chosen below the kernel's ephemeral range:
bind(0) gives one from that range, which an outgoing connection (the nodes' own, to the job
port) may take as its local end before the node that should listen there binds it. With
MARUN_SIM_PORTS they come from that range alone (two simulations, or test lanes, on one machine
each with its own), and a range given wrong is bad input."""

from __future__ import annotations

import socket

import pytest

from marun.errors import InputError
from marun.sim.ports import ephemeral_start, free_port, port_range


def test_a_simulated_job_s_ports_are_free_and_below_the_ephemeral_range() -> None:
    top = ephemeral_start()
    for _ in range(20):
        port = free_port(env={})
        assert 10000 <= port < top
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free, as promised


def test_with_marun_sim_ports_every_port_comes_from_that_range() -> None:
    env = {"MARUN_SIM_PORTS": "6000-6015"}
    assert port_range(env) == (6000, 6016)
    seen = {free_port(env=env) for _ in range(200)}
    assert seen <= set(range(6000, 6016)) and len(seen) > 1


def _hold_16_ports() -> list[socket.socket]:
    """16 consecutive ports below the ephemeral range, every one bound here."""
    for base in range(12000, 30000, 16):
        held: list[socket.socket] = []
        for port in range(base, base + 16):
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                break
            held.append(sock)
        if len(held) == 16:
            return held
        for sock in held:
            sock.close()
    raise AssertionError("no 16 free ports in a row below 30000")


def test_a_range_without_a_free_port_is_bad_input_not_a_port_from_elsewhere() -> None:
    held = _hold_16_ports()
    low = held[0].getsockname()[1]
    try:
        with pytest.raises(InputError, match=r"^MARUN_SIM_PORTS='\d+-\d+': expected a range"):
            free_port(env={"MARUN_SIM_PORTS": f"{low}-{low + 15}"})
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize(
    "value",
    [
        "20000",
        "20000-",
        "a-b",
        "80-9000",
        "20000-20001",
        "9-8",
        "60000-70000",
        "20000 - 20100",
        "1e4-2e4",
    ],
)
def test_a_range_given_wrong_is_one_line_naming_what_was_expected(value: str) -> None:
    with pytest.raises(InputError) as info:
        port_range({"MARUN_SIM_PORTS": value})
    assert str(info.value).startswith("MARUN_SIM_PORTS=")
    assert "expected LOW-HIGH, ports from 1024 to 65535, 16 or more of them" in str(info.value)
    assert "\n" not in str(info.value)
