"""What node 0's job machine (marun.job.machine) asks its shell to do, one frozen dataclass per
kind: the machine decides, the shell (marun.job.coordinator: sockets, signing, the selector)
carries out, in the order given. `Handle` is the shell's connection, opaque to the machine: it
is compared and handed back, never read."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from marun.job.messages import LeaderMessage

Handle = Hashable
Key = tuple[int, int]  # (node, slot)
# a hub's heartbeats of a node (marun.plan.hubs): node, then one item a slot: idles (None: it did
# not beat), cpus and progress (each None where no slot has one)
NodeBeats = tuple[int, list[Optional[float]], Optional[list[Optional[float]]], Optional[list[Any]]]


@dataclass(frozen=True)
class Send:
    """One line to one member (nothing when it has no connection now)."""

    key: Key
    message: LeaderMessage


@dataclass(frozen=True)
class Broadcast:
    """One line to every member that has a connection."""

    message: LeaderMessage


@dataclass(frozen=True)
class Bind:
    """The connection's hello was taken: it now speaks for `key` (longer lines allowed)."""

    handle: Handle
    key: Key


@dataclass(frozen=True)
class Drop:
    handle: Handle


@dataclass(frozen=True)
class Refuse:
    """Counted and logged (marun.job.limits.RefusalLog); `close`: the connection is dropped."""

    handle: Handle
    why: str
    close: bool = True


@dataclass(frozen=True)
class TurnAway:
    """Refused with a reason the member logs, then closed once that line is out."""

    handle: Handle
    why: str


@dataclass(frozen=True)
class Announce:
    """A line on node 0's console."""

    text: str


@dataclass(frozen=True)
class Log:
    event: str
    level: str = "info"
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteReport:
    """job.json, now (before `done`: a node that ends on it finds the file there)."""


Action = Union[Send, Broadcast, Bind, Drop, Refuse, TurnAway, Announce, Log, WriteReport]
