"""Restart rounds (docs/supervision.md, "Restart rounds"): the rule that says whether a failure
starts a new round or ends the job, the port each round moves a framework's rendezvous to, and
the words a round is announced with. One rule for the whole job, applied by its job machine
(marun.job.machine: node 0's, or a job of one node's own, marun.job.local_job).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from marun.inputs.numbers import PORT_MAX
from marun.plan.launch_plan import ProcessSpec, Supervision
from marun.runtime.failure import Failure

_PORT_TRIES = 200  # ports tried upward from a round's first choice


@dataclass
class RoundRule:
    """The job's budget of rounds and what no round can follow: an exit code the user declared
    fatal, and a failure within `quick` seconds of its round's start after a round that began
    the same way (a rank that fails at once every time: rounds would only repeat it)."""

    budget: int
    fatal: tuple[int, ...] = ()
    quick: float = 30.0
    round: int = 0  # the job's current round
    began_quick: bool = False  # the current round began after a failure that came quick

    def next_round(self, code: int | None, uptime: float | None) -> str | None:
        """None when the failure (exit `code`, `uptime` seconds after its round's start; None:
        not a rank's exit, e.g. a lost node) starts a new round (`round` is then its number);
        else why the job ends instead."""
        quick = uptime is not None and uptime < self.quick
        if code is not None and code in self.fatal:
            return f"exit code {code} is fatal (fatal_exit_codes)"
        if self.round >= self.budget:
            return f"no restart round left (max_restarts {self.budget})"
        if quick and self.began_quick:
            return (
                f"it failed within {self.quick:g}s of its round's start, as in the round before "
                "(quick_failure): another round would repeat it"
            )
        self.round += 1
        self.began_quick = quick
        return None

    @classmethod
    def of(cls, options: Supervision) -> RoundRule:
        """The plan's rule (`max_restarts`, `fatal_exit_codes`, `quick_failure`), at round 0."""
        return cls(options.max_restarts, options.fatal_exit_codes, options.quick_failure)


def planned_ports(processes: Iterable[ProcessSpec], names: tuple[str, ...]) -> dict[str, str]:
    """Round 0's value of each port variable in `names` that these processes are given."""
    return {name: proc.env[name] for proc in processes for name in names if name in proc.env}


def round_ports(
    planned: Mapping[str, str],
    names: tuple[str, ...],
    round_: int,
    avoid: int = 0,
    before: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """The ports of round `round_` >= 1 for the variables `names` (their round-0 values in
    `planned`): the first port free on this node from the planned one + `round_` upward, and
    above the one the variable had in the round before (`before`), never `avoid` (the job's own
    port) nor one given to another variable of the round. Round 0 keeps the plan's (marun run
    checked them free before anything started). Above the round before's: when planned + 1 was
    busy at round 1 (so it took planned + 2), round 2's first choice, planned + 2, is free again
    once round 1's ranks are gone, and two rounds would share a rendezvous port."""
    from marun.inputs.port_probe import bind_error

    out: dict[str, str] = {}
    taken = {avoid}
    for name in names:
        try:
            base = int(planned[name])
        except (KeyError, ValueError):
            continue
        if round_ == 0:
            out[name] = str(base)
            continue
        first = max(base + round_, (before or {}).get(name, 0) + 1)
        for port in range(first, min(first + _PORT_TRIES, PORT_MAX + 1)):
            if port not in taken and bind_error(port) is None:
                out[name] = str(port)
                taken.add(port)
                break
    return out


def describe_cause(cause: Failure | None) -> str:
    """`node 1 rank 3 exit 1`, `node 0 mpi-leader signal SIGKILL`, or a lost node's or a hang's
    `why`: what started a round, in a few words."""
    if cause is None:
        return "a failure"
    if not cause.of_a_process:
        return (cause.why or "a failure")[:200]
    parts = [] if cause.node is None else [f"node {cause.node}"]
    parts.append(f"rank {cause.rank}" if cause.rank is not None else str(cause.name))
    if cause.signal:
        parts.append(f"signal {cause.signal}")
    elif cause.exit_code is not None:
        parts.append(f"exit {cause.exit_code}")
    return " ".join(parts)


def round_line(round_: int, budget: int, cause: Failure | None) -> str:
    """The marker each rank's log gets before its process of round `round_` starts."""
    return f"marun: round {round_}/{budget} after {describe_cause(cause)}"
