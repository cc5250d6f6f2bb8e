"""What a node's marun and node 0's say to each other, one frozen dataclass per message type,
both ways. Each has its wire `KIND` and its fields' JSON form (`to_wire`; marun.job.protocol adds
the job, the node, the nonces and the signature). marun.job.protocol checked each field's type
on a signed line; `member_message` and `leader_message` turn that line's body into one of
these, so neither side's logic (marun.job.machine, marun.job.member_machine) reads a dict from
the wire nor writes one to it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Union

from marun.exit_codes import LOST_EXIT
from marun.inputs.numbers import is_port
from marun.runtime.failure import Failure

MAX_PLACE_HOSTS = 4096  # a start's places held by spares (no job keeps more spares)


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

    KIND: ClassVar[str] = "hello"

    def to_wire(self) -> dict[str, Any]:
        """(node and slot are every line's own; the member adds its nonce)"""
        return {
            "instance": self.instance,
            "host": self.host,
            "leader": self.leader,
            "started": self.started,
            "daemons_only": self.daemons_only,
            "version": self.version,
        }


@dataclass(frozen=True)
class Beat:
    idle: float  # seconds without a rank's line
    cpu: float | None  # CPU seconds its ranks have used
    progress: Any = None  # its ranks' steps (marun.progress.tracker.NodeReport), when any

    KIND: ClassVar[str] = "hb"

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"idle": round(self.idle, 2)}
        if self.cpu is not None:
            out["cpu"] = round(self.cpu, 2)
        if self.progress is not None:  # nothing on the wire where no rank prints steps
            out["progress"] = self.progress.to_wire()
        return out


@dataclass(frozen=True)
class FailureSaid:
    failure: Failure
    round: int | None
    uptime: float | None

    KIND: ClassVar[str] = "failure"

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"failure": self.failure.to_wire(), "round": self.round}
        if self.uptime is not None:
            out["uptime"] = round(self.uptime, 3)
        return out


@dataclass(frozen=True)
class Stopped:
    round: int

    KIND: ClassVar[str] = "stopped"

    def to_wire(self) -> dict[str, Any]:
        return {"round": self.round}


@dataclass(frozen=True)
class Running:
    round: int
    ranks: int

    KIND: ClassVar[str] = "running"

    def to_wire(self) -> dict[str, Any]:
        return {"round": self.round, "ranks": self.ranks}


@dataclass(frozen=True)
class Stacks:
    text: str

    KIND: ClassVar[str] = "stacks"

    def to_wire(self) -> dict[str, Any]:
        return {"text": self.text}


@dataclass(frozen=True)
class End:
    outcome: str
    exit_code: int

    KIND: ClassVar[str] = "end"

    def to_wire(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "exit_code": self.exit_code}


@dataclass(frozen=True)
class PreflightSaid:
    """A node's checks and its probe listener (marun.preflight.result.NodeReport)."""

    report: Any

    KIND: ClassVar[str] = "preflight"

    def to_wire(self) -> dict[str, Any]:
        return {"report": self.report.to_dict()}


@dataclass(frozen=True)
class LinkSaid:
    """A node's probe of the next node (marun.preflight.result.LinkResult)."""

    link: Any

    KIND: ClassVar[str] = "link"

    def to_wire(self) -> dict[str, Any]:
        return {"link": self.link.to_dict()}


MemberMessage = Union[
    Hello, Beat, FailureSaid, Stopped, Running, Stacks, End, PreflightSaid, LinkSaid
]


def progress_of(value: object) -> Any:
    """A heartbeat's progress report, or None (none, or not one: the beat counts all the same)."""
    if not isinstance(value, dict):
        return None
    from marun.progress.tracker import NodeReport  # only where a node reports progress

    try:
        return NodeReport.from_wire(value)
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def beat_of(idle: float, cpu: float | None, progress: object = None) -> Beat:
    """An `hb` line's (or a `beats` entry's) heartbeat: idle, cpu, progress."""
    return Beat(max(0.0, idle), cpu, None if progress is None else progress_of(progress))


def hello_of(node: int, slot: int, said: Mapping[str, Any]) -> Hello:
    """A `hello` line's hello (or a `hellos` line's entry's), its fields typed already
    (protocol.check_fields)."""
    return Hello(
        node=node,
        slot=slot,
        instance=str(said.get("instance", "")),
        host=str(said.get("host", "?"))[:200],
        leader=str(said.get("leader", "")),
        started=said.get("started") is True,
        daemons_only=said.get("daemons_only") is True,
        version=int(said.get("version", 1)),
    )


def member_message(body: Mapping[str, Any]) -> MemberMessage | None:
    """The typed message of a decoded body (None: a type a member does not send; ValueError:
    a preflight report or link that is not one)."""
    kind = body["type"]
    if kind == "hello":
        return hello_of(int(body["node"]), int(body["slot"]), body)
    if kind == "hb":
        cpu = body.get("cpu")
        idle = float(body.get("idle", 0.0))
        return beat_of(idle, None if cpu is None else float(cpu), body.get("progress"))
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
    if kind in ("preflight", "link"):
        # marun.preflight only where a preflight runs (its import is not on every node's path);
        # its from_dict checks every type and bounds every size: ValueError, a refused line
        from marun.preflight.result import LinkResult, NodeReport

        if kind == "preflight":
            return PreflightSaid(NodeReport.from_dict(body.get("report")))
        return LinkSaid(LinkResult.from_dict(body.get("link")))
    return None


# -- what node 0 says to a member ------------------------------------------------------------


@dataclass(frozen=True)
class Challenge:
    """Node 0's first line on every connection (its nonce is the protocol's; read by
    marun.job.handshake before any other)."""

    instance: str  # node 0's coordinator's
    version: int

    KIND: ClassVar[str] = "challenge"

    def to_wire(self) -> dict[str, Any]:
        return {"instance": self.instance, "version": self.version}


@dataclass(frozen=True)
class Welcome:
    instance: str  # node 0's coordinator's
    wall: float | None  # node 0's clock when it said it (the preflight's clock offset)

    KIND: ClassVar[str] = "welcome"

    def to_wire(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "wall": None if self.wall is None else round(self.wall, 3),
        }


@dataclass(frozen=True)
class Refused:
    why: str

    KIND: ClassVar[str] = "refused"

    def to_wire(self) -> dict[str, Any]:
        return {"why": self.why}


@dataclass(frozen=True)
class Start:
    round: int
    ports: dict[str, str]  # the round's ports that move (valid port numbers only)
    # lines for every console: the preflight's warnings (round 0), the spares that took a place
    notes: tuple[str, ...] = ()
    # hot spares: (place, host) of each place a spare holds now (node 0's hostfile in mpi mode,
    # every process's TF_CONFIG in tensorflow mode name its host: marun.plan.place_hosts)
    hosts: tuple[tuple[int, str], ...] = ()

    KIND: ClassVar[str] = "start"

    def to_wire(self) -> dict[str, Any]:
        """(round 0 with no ports and no notes is the bare line every node of a large job gets)"""
        out: dict[str, Any] = {}
        if self.round:
            out["round"] = self.round
            out["ports"] = {k: int(v) for k, v in self.ports.items()}
        if self.notes:
            out["notes"] = list(self.notes)
        if self.hosts:
            out["hosts"] = {str(place): host for place, host in self.hosts}
        return out


@dataclass(frozen=True)
class Probe:
    """The next node of the ring, for this node's probe (marun.preflight.result.NodeReport)."""

    target: Any

    KIND: ClassVar[str] = "probe"

    def to_wire(self) -> dict[str, Any]:
        return {"target": self.target.to_dict()}


@dataclass(frozen=True)
class Restart:
    round: int
    cause: Failure | None

    KIND: ClassVar[str] = "restart"

    def to_wire(self) -> dict[str, Any]:
        return {"round": self.round, "cause": None if self.cause is None else self.cause.to_wire()}


@dataclass(frozen=True)
class StopJob:
    """The stop node 0 sends (once): the job's exit code and its first failure (none: the job's
    TF parameter servers were all that was left)."""

    code: int
    failure: Failure | None

    KIND: ClassVar[str] = "stop"

    def to_wire(self) -> dict[str, Any]:
        failure = None if self.failure is None else self.failure.to_wire()
        return {"code": self.code, "failure": failure}


@dataclass(frozen=True)
class Dump:
    sample: bool  # a sample for the hang watchdog to compare, not the dump of a hang

    KIND: ClassVar[str] = "dump"

    def to_wire(self) -> dict[str, Any]:
        return {"sample": self.sample}


@dataclass(frozen=True)
class Done:
    code: int

    KIND: ClassVar[str] = "done"

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code}


@dataclass(frozen=True)
class Place:
    """Hot spares (marun.plan.spares): the place this node's processes are planned for (sent
    before its first `start`; a spare hears it when a lost node's place becomes its own)."""

    place: int

    KIND: ClassVar[str] = "place"

    def to_wire(self) -> dict[str, Any]:
        return {"place": self.place}


@dataclass(frozen=True)
class LeaderBeat:
    KIND: ClassVar[str] = "hb"

    def to_wire(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class DropLane:
    """Node 0 lets go of one slot behind a relay (marun.job.relay closes that slot's local
    connection; its marun connects again, or is gone). Never reaches a member."""

    KIND: ClassVar[str] = "drop"

    def to_wire(self) -> dict[str, Any]:
        return {}


LeaderMessage = Union[
    Welcome, Refused, Start, Restart, StopJob, Dump, Done, LeaderBeat, Probe, Place, DropLane
]


def _ports(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {
        str(k)[:64]: str(v)
        for k, v in value.items()
        if isinstance(v, int) and not isinstance(v, bool) and is_port(v)
    }


def _hosts(value: object) -> tuple[tuple[int, str], ...]:
    """A start's places held by spares: only places and host names or addresses (they go into
    a hostfile and a TF_CONFIG)."""
    from marun.inputs.hosts import is_host

    if not isinstance(value, dict):
        return ()
    out = []
    for key, host in list(value.items())[:MAX_PLACE_HOSTS]:
        if isinstance(key, str) and key.isdigit() and isinstance(host, str) and is_host(host):
            out.append((int(key), host))
    return tuple(sorted(out))


def _failure(value: object) -> Failure | None:
    return Failure.from_wire(value) if isinstance(value, dict) else None


def leader_message(body: Mapping[str, Any]) -> LeaderMessage | None:
    """The typed message of a decoded body from node 0 (None: a type node 0 does not send)."""
    kind = body["type"]
    if kind == "welcome":
        wall = body.get("wall")
        return Welcome(str(body.get("instance", "")), None if wall is None else float(wall))
    if kind == "refused":
        return Refused(str(body.get("why", ""))[:2000])
    if kind == "start":
        notes = body.get("notes") or []
        said = tuple(str(n)[:500] for n in notes[:32] if isinstance(n, str))
        return Start(
            int(body.get("round", 0)), _ports(body.get("ports")), said, _hosts(body.get("hosts"))
        )
    if kind == "restart":
        return Restart(int(body.get("round", 0)), _failure(body.get("cause")))
    if kind == "stop":
        return StopJob(int(body.get("code", LOST_EXIT)), _failure(body.get("failure")))
    if kind == "dump":
        return Dump(body.get("sample") is True)
    if kind == "done":
        return Done(int(body.get("code", 0)))
    if kind == "hb":
        return LeaderBeat()
    if kind == "place":
        return Place(int(body.get("place", 0)))
    if kind == "probe":
        from marun.preflight.result import NodeReport

        try:
            return Probe(NodeReport.from_dict(body.get("target")))
        except ValueError:
            return None
    return None
