"""The job's failure, one type (`Failure`): what a node's supervisor reports (a rank's end, a stop
signal to its marun), what node 0's machine decides on, what every node is told in `stop`, what
a round's cause is and what job.json keeps. It lives in the runtime, the lower of the two layers
that speak it (marun.job imports the runtime, never the reverse). On the wire and in job.json it
is a JSON object (`to_wire`); from the wire it is read field by field, each of its type and cut
to a sane size (`from_wire`: whatever else a signed line holds is left out)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marun.exit_codes import failure_exit

# Text fields and how much of each is kept; `stop_signal` is the signal that stopped a node's
# marun (not a rank's): it ends the job, never a restart round (docs/supervision.md, "Signals").
_TEXT = {
    "why": 2000,
    "name": 200,
    "host": 200,
    "signal": 40,
    "stop_signal": 40,
    "log": 1000,
    "no_restart": 2000,
}
_INTS = ("node", "rank", "exit_code")
_STACKS = 1 << 19
_TAIL_LINES, _TAIL_WIDTH = 50, 1000
# What names a round's cause (job.json's rounds, the round's console line)
CAUSE_FIELDS = ("node", "host", "name", "rank", "exit_code", "signal", "why")


@dataclass(frozen=True)
class Failure:
    exit_code: int | None = None
    node: int | None = None
    host: str | None = None
    name: str | None = None  # a process that is not a rank (an MPI leader, a scheduler)
    rank: int | None = None
    signal: str | None = None  # the signal that ended the process, e.g. SIGKILL
    stop_signal: str | None = None
    why: str | None = None
    log: str | None = None
    stacks: str | None = None
    tail: tuple[str, ...] | None = None
    no_restart: str | None = None  # why no restart round followed it

    @property
    def code(self) -> int:
        """The job's exit code for this failure (1 where it names none)."""
        return failure_exit(self.exit_code)

    @property
    def of_a_process(self) -> bool:
        """A rank's or another process's end (what the round rule's exit codes are about)."""
        return self.rank is not None or self.name is not None

    def but(self, **changes: Any) -> Failure:
        return dataclasses.replace(self, **changes)

    def cause(self) -> Failure:
        """What names a round's cause (job.json's rounds, the round's console line): this
        failure without its log, tail and stacks."""
        return Failure(**{k: getattr(self, k) for k in CAUSE_FIELDS})

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if f.name == "tail" else value
        return out

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Failure:
        fields: dict[str, Any] = {}
        for name, limit in _TEXT.items():
            value = data.get(name)
            if isinstance(value, str):
                fields[name] = value[:limit]
        for name in _INTS:
            value = data.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                fields[name] = value
        stacks = data.get("stacks")
        if isinstance(stacks, str):
            fields["stacks"] = stacks[:_STACKS]
        tail = data.get("tail")
        if isinstance(tail, list):
            fields["tail"] = tuple(
                line[:_TAIL_WIDTH] for line in tail[:_TAIL_LINES] if isinstance(line, str)
            )
        return cls(**fields)
