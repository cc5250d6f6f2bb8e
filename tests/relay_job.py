"""A job of real relays and members in this process (threads and sockets, no process): node 0's
real coordinator, each node's relay and its slots' members; for tests of one connection per node
(tests/unit/test_job_relay.py) and of liveness hubs (tests/cli/test_job_hub_link.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from marun.inputs.records import replace
from marun.job.coordinator import Coordinator
from marun.job.member import Member
from marun.job.relay import Relay
from marun.plan.coordination import Coordination
from marun.runtime.joblink import JobEvent

GUARD = 40.0  # seconds: a hang guard, never a measure


@dataclass
class Job:
    coordinator: Coordinator
    relays: dict[int, Relay] = field(default_factory=dict)
    members: dict[tuple[int, int], Member] = field(default_factory=dict)
    events: dict[tuple[int, int], list[JobEvent]] = field(default_factory=dict)

    def add_node(self, index: int, secret: bytes) -> None:
        """Node `index`'s relay and a member for each of its slots, started."""
        node = self.node(index)
        self.relays[index] = Relay(node, secret, "127.0.0.1", leader_local=True).start()
        for slot in range(node.slots):
            self.members[(index, slot)] = Member(replace(node, slot=slot), secret, "127.0.0.1")
            self.events[(index, slot)] = []

    def node(self, index: int) -> Coordination:
        port = self.coordinator.port.server.getsockname()[1]
        return replace(self.coordinator.coord, port=port, index=index)

    def wait(self, what: Callable[[], bool], why: str) -> None:
        end = time.monotonic() + GUARD
        while not what():
            self.poll()
            assert time.monotonic() < end, why
            time.sleep(0.02)

    def poll(self) -> None:
        for key, member in self.members.items():
            self.events[key] += member.poll()

    def heard(self, key: tuple[int, int], kind: str) -> list[JobEvent]:
        return [e for e in self.events[key] if e.kind == kind]

    def started(self) -> bool:
        return all(self.heard(key, "start") for key in self.members)

    def close(self) -> None:
        for member in self.members.values():
            member.close()
        for relay in self.relays.values():
            relay.close(linger=0.0)
        self.coordinator.close(linger=0.0)
