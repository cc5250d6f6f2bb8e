"""The stop node 0 sends once (`Stop`): the job's exit code and its first failure
(marun.runtime.failure.Failure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from marun.runtime.failure import Failure


@dataclass(frozen=True)
class Stop:
    """The stop node 0 sent (once): the job's exit code and its first failure (none: the job's
    TF parameter servers were all that was left)."""

    code: int
    failure: Failure | None

    def to_wire(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "failure": None if self.failure is None else self.failure.to_wire(),
        }
