"""`console_ranks`: which processes' lines reach marun's stdout (log files always get them all).

Part of the plan's supervision settings, so a bad selection is refused when the plan is built.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from marun.errors import InputError, bad_value
from marun.inputs.records import dataclass

# ASCII only: str.isdigit() also says yes to "²" and "١٢", which int() refuses or reads otherwise.
_DIGITS = re.compile(r"[0-9]{1,18}")
_NAME = re.compile(r"[A-Za-z0-9_.-]*[A-Za-z][A-Za-z0-9_.-]*")  # a name holds a letter


@dataclass(frozen=True)
class ConsoleSelection:
    """Empty or `all` shows everything; `none` shows nothing; otherwise ranks (`0`, `0-3`) and
    process names or roles (`scheduler`, `ps`), comma-separated."""

    everything: bool = True
    ranks: frozenset[tuple[int, int]] = frozenset()  # (first, last) ranges, both included
    names: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, tokens: Sequence[str]) -> ConsoleSelection:
        words = [t.strip() for t in tokens if t.strip()]
        if not words or words == ["all"]:
            return cls()
        if words == ["none"]:
            return cls(everything=False)
        ranks: set[tuple[int, int]] = set()
        names: set[str] = set()
        for word in words:
            low, dash, high = word.partition("-")
            if _DIGITS.fullmatch(low) and (not dash or _DIGITS.fullmatch(high)):
                first, last = int(low), int(high) if dash else int(low)
                if last < first:
                    raise _bad_selection(tokens)
                ranks.add((first, last))
            elif _NAME.fullmatch(word):
                names.add(word)
            else:
                raise _bad_selection(tokens)
        return cls(everything=False, ranks=frozenset(ranks), names=frozenset(names))

    def shows(self, name: str, role: str, rank: int | None) -> bool:
        if self.everything:
            return True
        if rank is not None and any(first <= rank <= last for first, last in self.ranks):
            return True
        return name in self.names or role in self.names


def _bad_selection(tokens: Sequence[str]) -> InputError:
    return bad_value(
        "console_ranks",
        ",".join(tokens),
        "all, none, or a comma list of ranks (3), rank ranges (0-7) and process names/roles",
    )
