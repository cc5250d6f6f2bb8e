"""Node 0's members of the job by (node, slot), kept so that what arrival asks on every hello
costs the same at 8,192 members as at 3 (docs/performance.md, "The job's coordination at
scale"): how many of a node's slots are here and how many nodes are complete are counted as
members come and go, not recomputed; the members whose connection closed are noted when it
closes, so the barrier's check of who left looks at those alone, not at every member each tick.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, MutableMapping, ValuesView
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from marun.job.wire import MemberState

Key = tuple[int, int]  # (node, slot)


class Roster(MutableMapping[Key, "MemberState"]):
    """A dict of the members whose every change goes through __setitem__/__delitem__ (the
    MutableMapping mixins included: pop, clear, update), so the per-node counts stay true
    whoever changes it."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._members: dict[Key, MemberState] = {}
        self._per_node: dict[int, int] = {}
        self.complete = 0  # nodes with every slot here
        # Members whose connection closed since arrival last looked (marun.job.wire._drop);
        # a set, so a member that reconnects and drops again is one entry, whatever the phase.
        self.closed: set[Key] = set()

    def node_complete(self, node: int) -> bool:
        return self._per_node.get(node, 0) == self.slots

    def _count(self, node: int, step: int) -> None:
        before = self._per_node.get(node, 0)
        after = before + step
        if after:
            self._per_node[node] = after
        else:
            self._per_node.pop(node, None)
        self.complete += (after == self.slots) - (before == self.slots)

    def __setitem__(self, key: Key, value: MemberState) -> None:
        if key not in self._members:
            self._count(key[0], 1)
        self._members[key] = value

    def __delitem__(self, key: Key) -> None:
        del self._members[key]
        self._count(key[0], -1)

    # Reads go straight to the dict (the coordinator's tick walks the members).
    def __getitem__(self, key: Key) -> MemberState:
        return self._members[key]

    def __contains__(self, key: object) -> bool:
        return key in self._members

    def __iter__(self) -> Iterator[Key]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def get(self, key: Key, default: MemberState | None = None) -> MemberState | None:  # type: ignore[override]
        return self._members.get(key, default)

    def keys(self) -> KeysView[Key]:
        return self._members.keys()

    def values(self) -> ValuesView[MemberState]:
        return self._members.values()

    def items(self) -> ItemsView[Key, MemberState]:
        return self._members.items()

    def __repr__(self) -> str:
        return f"Roster({self._members!r})"
