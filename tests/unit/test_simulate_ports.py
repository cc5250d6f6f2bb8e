"""The ports `marun simulate` hands its nodes are chosen below the kernel's ephemeral range:
bind(0) gives one from that range, which an outgoing connection (the nodes' own, to the job
port) may take as its local end before the node that should listen there binds it."""

from __future__ import annotations

import socket

from marun.sim.simulate import _ephemeral_start, free_port


def test_a_simulated_job_s_ports_are_free_and_below_the_ephemeral_range() -> None:
    top = _ephemeral_start()
    for _ in range(20):
        port = free_port()
        assert 10000 <= port < top
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free, as promised
