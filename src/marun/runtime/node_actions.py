"""What one node's supervision machine (marun.runtime.node_machine) asks its shell
(marun.runtime.supervisor: fork, signals, pipes, the job's link) to do, one frozen dataclass per
kind, carried out in the order given. A record is named by its index in the node's plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from marun.plan.launch_plan import Supervision
from marun.runtime.failure import Failure


@dataclass(frozen=True)
class StartRound:
    """Start these records, in order, for the machine's current round (`mark`: the line each
    log gets first; None in round 0); stop at the first that cannot start (the machine hears
    `start_failed`), else tell the machine `round_started`."""

    indexes: tuple[int, ...]
    mark: str | None


@dataclass(frozen=True)
class Restart:
    """Start record `index` again on its own (restart_on_failure)."""

    index: int


@dataclass(frozen=True)
class StartWarmSpares:
    """`preload`: the round's processes are started; start a spare interpreter for each
    restarted process that has none (marun.runtime.warm_spare), for the next round. (The
    node's stop, SignalAll, kills every spare: none is a process of the job.)"""


@dataclass(frozen=True)
class SignalAll:
    """`signum` to every process group started that still has a member, then to any adopted
    orphan outside those groups."""

    signum: int


@dataclass(frozen=True)
class SignalRound:
    """`signum` to the process groups of the round's non-daemon processes."""

    signum: int


@dataclass(frozen=True)
class SignalOrphans:
    """`signum` to the adopted orphans not yet signalled (they came while stopping)."""

    signum: int


@dataclass(frozen=True)
class PassOn:
    """A signal that does not stop the job (SIGUSR1/2), to every running process's group."""

    signum: int


@dataclass(frozen=True)
class TakeTail:
    """The first failure's record: its last lines from its log where no pump kept them."""

    index: int


@dataclass(frozen=True)
class ReportFailure:
    """Tell node 0 (`index`: this record's end, with its log and last lines once its pump has
    them; None: `failure` as it is); `uptime`: seconds since its round's start."""

    failure: Failure
    index: int | None = None
    uptime: float | None = None


@dataclass(frozen=True)
class ReportStopped:
    round: int


@dataclass(frozen=True)
class ReportRunning:
    round: int
    ranks: int


@dataclass(frozen=True)
class Activity:
    """The hang watchdog's silence counts from now (a round's start)."""


@dataclass(frozen=True)
class RequestStacks:
    sample: bool


@dataclass(frozen=True)
class ReportLeft:
    """Processes outlived SIGKILL: say which."""


@dataclass(frozen=True)
class Emit:
    """One of marun's events (structlog; held back until every process started)."""

    event: str
    level: str = "info"
    fields: dict[str, Any] = field(default_factory=dict)


NodeAction = Union[
    StartRound,
    Restart,
    StartWarmSpares,
    SignalAll,
    SignalRound,
    SignalOrphans,
    PassOn,
    TakeTail,
    ReportFailure,
    ReportStopped,
    ReportRunning,
    Activity,
    RequestStacks,
    ReportLeft,
    Emit,
]


def after_round_started(options: Supervision, round_: int) -> list[NodeAction]:
    """What follows round `round_`'s processes all started, beside what the node's machine
    says: with `preload`, spares for the next round while one may come (max_restarts)."""
    return [StartWarmSpares()] if options.preload and round_ < options.max_restarts else []
