"""How often the job's heartbeats go, both ways (a rate that does not grow with the job), and a
member's back-off before it tries a connection again (`Backoff`).

A heartbeat says "this marun runs" where nothing else was said: node 0 declares a member lost
after peer_timeout without a line from it, a member gives up on node 0 after as long. A marun
that dies closes its connections (the other side sees it at once); heartbeats are for the
silent ones (SIGSTOP, a frozen pod, a cut network), and peer_timeout is what finds them: the
interval only has to be well inside it. At one a second each way, node 0 of 8,192 marun
processes signed, sent, read and checked 16,384 lines a second (56% of a core, every second of
the job; docs/performance.md). So the interval grows with the job: node 0 takes in about
BEATS_PER_SECOND heartbeats a second (and sends as many), never more often than HEARTBEAT, never
fewer than three per peer_timeout (the rule that sets peer_timeout's floor, MIN_PEER_TIMEOUT:
a node is lost after three missed heartbeats at least) and, with the hang watchdog on, never
fewer than four per hang_timeout (its CPU figures come with the heartbeats: marun.job.hang
compares them over hang_timeout). Small jobs (up to BEATS_PER_SECOND marun processes) keep one
a second. Both sides compute it from what both know (the job's shape and timeouts, in the plan).

Lost-node detection does not depend on it: node 0 checks every member's silence against
peer_timeout each tick, so a node that goes silent is declared lost peer_timeout after its last
line (within a tick and a second), whatever the interval.
"""

from __future__ import annotations

import random
import time

from marun.plan.coordination import HEARTBEAT, Coordination

ARRIVALS_PER_SECOND = 2000  # connections node 0 takes in a second, about (accept, challenge,
# hello: 110-190 us each measured, docs/performance.md): a member's tries spread over the
# time its job's connections take to arrive
CONNECT_WAIT = 2.0  # seconds for a connection and node 0's challenge, in a small job
BEATS_PER_SECOND = 256  # heartbeats node 0 takes in a second (and sends) in a large job, about
PER_PEER_TIMEOUT = 3  # heartbeats at least per peer_timeout
PER_HANG_TIMEOUT = 4  # heartbeats (CPU figures) at least per hang_timeout


def heartbeat_interval(
    members: int, peer_timeout: float, hang_timeout: float | None = None
) -> float:
    """Seconds between two heartbeats of one marun (and node 0's to it) in a job of `members`
    marun processes (nodes x slots)."""
    most = peer_timeout / PER_PEER_TIMEOUT
    if hang_timeout is not None:
        most = min(most, hang_timeout / PER_HANG_TIMEOUT)
    return max(HEARTBEAT, min(members / BEATS_PER_SECOND, most))


def job_interval(coord: Coordination) -> float:
    return heartbeat_interval(coord.nodes * coord.slots, coord.peer_timeout, coord.hang_timeout)


class Beat:
    """A member's heartbeat clock. The first comes at once in a small job; in a large one at a
    random point of the first interval, so that 8,192 members that start together do not beat
    together."""

    def __init__(self, coord: Coordination) -> None:
        self.every = job_interval(coord)
        self._next = 0.0 if self.every <= HEARTBEAT else None

    def due(self, now: float) -> bool:
        if self._next is None:
            self._next = now + random.uniform(0.0, self.every)
        if now < self._next:
            return False
        self._next += self.every  # on its cadence; after a stall, an interval from now
        if self._next <= now:
            self._next = now + self.every
        return True


def connect_wait(connections: int) -> float:
    """Seconds a try of a connection waits for node 0's challenge in a job of `connections`
    connections into node 0 (nodes, with relays): node 0 may be answering the others first."""
    return CONNECT_WAIT + connections / ARRIVALS_PER_SECOND


class Backoff:
    """A member's wait before its next try of a connection. One that could not be made (node
    0's marun not up yet: the usual case while pods start) is tried again after FIRST_RETRY,
    jittered, plus a random part of the time the job's `connections` take to arrive at
    ARRIVALS_PER_SECOND (0.5 s more at 1,024 nodes, 2 s at 4,096), so that a job's members
    that failed together do not come back together. One turned away (another job's marun on
    the port, a marun too many for this node, another protocol version) waits twice as long
    each time, up to MAX_RETRY, so that a member turned away costs node 0 next to nothing. One
    welcomed and then dropped (a network blip) is tried again at once: node 0 counts a node
    lost 1.5 s after its drop."""

    FIRST_RETRY = 0.5
    MAX_RETRY = 5.0

    def __init__(self, connections: int = 1) -> None:
        self.next_try = 0.0  # monotonic: no try before this
        self._wait = self.FIRST_RETRY
        self._spread = connections / ARRIVALS_PER_SECOND

    def failed(self, turned_away: bool) -> None:
        wait = self._wait if turned_away else self.FIRST_RETRY
        jitter = random.uniform(0.0, self._spread)
        self.next_try = time.monotonic() + wait * random.uniform(0.5, 1.5) + jitter
        if turned_away:
            self._wait = min(2 * self._wait, self.MAX_RETRY)

    def reset(self) -> None:
        self.next_try = 0.0
        self._wait = self.FIRST_RETRY
