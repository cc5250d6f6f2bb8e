"""The supervisor's view of its job: a small hook object, so that the runtime never imports the
coordination code (marun.launch hands one in: marun.job's link to node 0 for a plan with a
coordination section, else marun.job.local_job, the job of this node alone; the exec path loads
none of it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from marun.runtime.failure import Failure


@dataclass(frozen=True)
class JobEvent:
    """What the leader says: `place` (hot spares: the place, `code`, this node's processes are
    planned for; marun.launch reads it before the supervisor starts), `start` (every node has
    arrived; `code` the restart round, 0 the first, with the round's `ports`), `restart` (round
    `code` begins, for the cause in `failure`: every node stops its ranks), `stop` (with the
    job's exit code and its first failure: node, host, rank, exit code or signal, the last lines
    of its log, or `why` for a node lost or a hang) or `dump` (the hang watchdog wants every
    rank's stacks; `code` 1: a sample to compare, not the dump of a hang)."""

    kind: str
    code: int
    failure: Optional[Failure] = None
    ports: Mapping[str, str] = field(default_factory=dict)
    # `start` with hot spares: (place, host) of each place a spare holds (marun.plan.place_hosts)
    hosts: tuple[tuple[int, str], ...] = ()


class JobLink(Protocol):
    def fileno(self) -> int: ...

    def poll(self) -> list[JobEvent]: ...

    def watch_progress(self, source: Callable[[float], Any]) -> None:
        """Where this node's ranks' steps come from (runtime.node_progress.NodeProgress.report,
        called with the monotonic time): the link sends node 0 what it returns with each
        heartbeat, when not None."""

    def activity(self) -> None:
        """A rank wrote something. Called from the relay's pump threads (one per pipe of a rank
        the console shows), each block they move, and from the thread that watches the logs of
        the ranks not shown (marun.runtime.direct_log): it must be cheap and safe from any
        thread."""

    def settled(self) -> None:
        """The node's first processes are started: what the link would rather not do on the way
        to them (imports) it may do now, before a failure needs it."""

    def report_failure(self, failure: Failure, uptime: float | None = None) -> None:
        """A failure on this node (the link adds the node and host); `uptime`: seconds since
        its round's start (None: not a rank's end)."""

    def report_stopped(self, round_: int) -> None:
        """Every rank of this node is gone for round `round_` (the round's barrier)."""

    def report_running(self, round_: int, ranks: int) -> None:
        """Round `round_`'s `ranks` processes of this node are started."""

    def report_stacks(self, text: str) -> None: ...

    def report_end(self, outcome: str, exit_code: int) -> int:
        """Say how this node ended; wait for the job's end and return its code (node 0's
        coordinator writes job.json itself, as the job ends)."""

    def close(self) -> None: ...
