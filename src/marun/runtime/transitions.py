"""Checked phase changes: each of marun's state machines (node 0's `JobPhase`, a node's link's
`MemberPhase`, the supervisor's `Phase`) writes its allowed moves down once, in a table
(`Transitions`), and changes phase only through `Transitions.move`. A move the table does not
allow raises `IllegalMove` under MARUN_STRICT_PHASES=1 (the test suite sets it, so no test can
pass over one) and is logged as an error naming both phases otherwise: never ignored in silence.

docs/architecture.md draws each table as a Mermaid state diagram (`mermaid()`);
tests/unit/test_phase_tables.py fails when the picture and the table differ.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

STRICT_VAR = "MARUN_STRICT_PHASES"

P = TypeVar("P", bound=Enum)


class IllegalMove(RuntimeError):
    """A phase change the machine's table does not allow (MARUN_STRICT_PHASES=1)."""


@dataclass(frozen=True)
class Transitions(Generic[P]):
    machine: str  # the name in the error and the diagram's title
    start: P
    moves: Mapping[P, tuple[P, ...]]  # every phase, with the phases it may move to

    def allowed(self, old: P, new: P) -> bool:
        return new in self.moves.get(old, ())

    def move(self, old: P, new: P, log: Callable[..., None]) -> P:
        """The phase after a move from `old` to `new`: `new` when the table allows it (staying
        is no move), else `old`, with the error raised (strict) or logged."""
        if new is old or self.allowed(old, new):
            return new
        if os.environ.get(STRICT_VAR) == "1":
            raise IllegalMove(f"{self.machine}: {old.value} -> {new.value} is not allowed")
        log("illegal_phase_move", "error", machine=self.machine, old=old.value, new=new.value)
        return old

    def mermaid(self) -> str:
        """The table as a Mermaid state diagram (docs/architecture.md)."""
        lines = ["stateDiagram-v2", f"    [*] --> {self.start.name}"]
        for old, news in self.moves.items():
            lines += [f"    {old.name} --> {new.name}" for new in news]
            if not news:
                lines.append(f"    {old.name} --> [*]")
        return "\n".join(lines)
