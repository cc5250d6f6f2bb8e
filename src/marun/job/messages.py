"""What a node's marun says to node 0, one frozen dataclass per message type. marun.job.protocol
checked each field's type on the signed line; `member_message` turns that line's body into one
of these, so the job's logic (marun.job.machine) never reads a dict from the wire."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from marun.job.failure import Failure


@dataclass(frozen=True)
class Hello:
    node: int
    slot: int
    instance: str  # a fresh nonce of each marun process: another one is a new marun
    host: str
    leader: str  # the coordinator instance the member's job started under ("" before)
    started: bool  # its job had started (it is reconnecting)
    daemons_only: bool  # its processes are TF parameter servers only
    version: int


@dataclass(frozen=True)
class Beat:
    idle: float  # seconds without a rank's line
    cpu: float | None  # CPU seconds its ranks have used


@dataclass(frozen=True)
class FailureSaid:
    failure: Failure
    round: int | None
    uptime: float | None


@dataclass(frozen=True)
class Stopped:
    round: int


@dataclass(frozen=True)
class Running:
    round: int
    ranks: int


@dataclass(frozen=True)
class Stacks:
    text: str


@dataclass(frozen=True)
class End:
    outcome: str
    exit_code: int


MemberMessage = Union[Hello, Beat, FailureSaid, Stopped, Running, Stacks, End]


def member_message(body: Mapping[str, Any]) -> MemberMessage | None:
    """The typed message of a decoded body (None: a type a member does not send)."""
    kind = body["type"]
    if kind == "hello":
        return Hello(
            node=int(body["node"]),
            slot=int(body["slot"]),
            instance=str(body.get("instance", "")),
            host=str(body.get("host", "?"))[:200],
            leader=str(body.get("leader", "")),
            started=body.get("started") is True,
            daemons_only=body.get("daemons_only") is True,
            version=int(body.get("version", 1)),
        )
    if kind == "hb":
        cpu = body.get("cpu")
        return Beat(max(0.0, float(body.get("idle", 0.0))), None if cpu is None else float(cpu))
    if kind == "failure":
        uptime, round_ = body.get("uptime"), body.get("round")
        return FailureSaid(
            Failure.from_wire(body.get("failure") or {}),
            None if round_ is None else int(round_),
            None if uptime is None else float(uptime),
        )
    if kind == "stopped":
        return Stopped(int(body.get("round", 0)))
    if kind == "running":
        return Running(int(body.get("round", 0)), int(body.get("ranks", 0)))
    if kind == "stacks":
        return Stacks(str(body.get("text", "")))
    if kind == "end":
        return End(str(body.get("outcome"))[:40], int(body.get("exit_code", 0)))
    return None
