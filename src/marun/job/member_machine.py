"""A node's side of the job, as a machine: fed what node 0 says (typed, marun.job.messages), how
its tries to connect went, and the time (each turn of the member's loop), it decides where this
node is (marun.job.phases.MEMBER_MOVES) and what the supervisor hears (`JobEvent`s). No sockets,
threads or clocks: marun.job.member is the shell (the socket, the challenge, heartbeats, the
pipe to the supervisor's loop) and carries out what this returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from marun.exit_codes import LOST_EXIT
from marun.job.messages import (
    Done,
    Dump,
    LeaderMessage,
    Place,
    Probe,
    Refused,
    Restart,
    Start,
    StopJob,
    Welcome,
)
from marun.job.phases import MEMBER_MOVES, MemberPhase
from marun.plan.coordination import Coordination
from marun.runtime.failure import Failure
from marun.runtime.joblink import JobEvent

STALL = 3.0  # seconds between two turns of the loop (it turns every 0.2 s): this marun was frozen


@dataclass(frozen=True)
class Push:
    """A word for the supervisor's loop."""

    event: JobEvent


@dataclass(frozen=True)
class Note:
    """A line in marun's log."""

    event: str
    level: str
    fields: dict[str, object]


@dataclass(frozen=True)
class Disconnect:
    pass


@dataclass(frozen=True)
class Welcomed:
    """Node 0 took this marun in: the next drop is a blip, tried again at once."""


@dataclass(frozen=True)
class RunPreflight:
    """This node's checks and its probe listener, now (marun.job.node_preflight)."""

    leader_wall: float | None  # node 0's clock in its welcome


@dataclass(frozen=True)
class ProbeNext:
    target: object  # marun.preflight.result.NodeReport of the next node


@dataclass(frozen=True)
class Say:
    """A line on this node's console (the preflight's warnings)."""

    text: str


MemberAction = Union[Push, Note, Disconnect, Welcomed, RunPreflight, ProbeNext, Say]


class MemberMachine:
    def __init__(self, coord: Coordination, now: float, *, preflight: bool = False) -> None:
        self.coord = coord
        self.preflight = preflight  # this marun runs the node's preflight (slot 0, not off)
        self._preflight_run = False
        self.phase = MemberPhase.WAITING
        self.started_at: float | None = None  # when `start` came (None: never)
        self.round = 0  # the restart round this node last started (or was told to stop for)
        self.done_code: int | None = None
        self.stop_event: JobEvent | None = None
        self.leader_instance = ""  # node 0's coordinator's, from its welcome
        self.welcomed = False  # the current connection had node 0's welcome
        self.clash = ""  # why node 0's port turned this marun away (another job's, ...)
        self.tries = 0
        self.last_error = ""
        self._said: set[str] = set()  # refusals logged already (each once)
        self._began = self._last_heard = self._last_turn = now
        # The leader gives up on missing nodes after arrival_timeout; a member whose leader
        # never answers gives up a peer_timeout later, naming it; one that node 0's port only
        # ever turned away (another job's marun there) gives up after arrival_timeout.
        self._give_up = now + coord.arrival_timeout + coord.peer_timeout
        self._out: list[MemberAction] = []
        self.gave_up = False  # on node 0 (never answered, or silent): the member's thread ends

    @property
    def done(self) -> bool:
        return self.phase is MemberPhase.DONE

    @property
    def last_turn(self) -> float:
        return self._last_turn

    def _taken(self) -> list[MemberAction]:
        out, self._out = self._out, []
        return out

    def _log(self, event: str, level: str = "info", **fields: object) -> None:
        self._out.append(Note(event, level, fields))

    def _enter(self, phase: MemberPhase) -> None:
        self.phase = MEMBER_MOVES.move(self.phase, phase, self._log)

    def _push(self, event: JobEvent) -> None:
        self._out.append(Push(event))

    # -- events -----------------------------------------------------------------------------

    def turn(self, now: float, connected: bool, waited: float = 0.0) -> list[MemberAction]:
        """A turn of the member's loop: this marun's own stall, and the time-outs. `waited`:
        seconds the loop spent since its last turn in a try of a connection (its wait for node
        0's challenge grows with the job: 3 s and more from 2,000 connections), which is node
        0's silence, not this marun's stall."""
        gap, self._last_turn = now - self._last_turn - waited, now
        if gap > STALL:
            # This marun did not run (frozen by SIGSTOP, or starved): node 0's lines wait in the
            # socket, read next; the silence was this node's, not node 0's.
            self._log("member_stalled", "warning", seconds=round(gap, 1))
            self._last_heard = max(self._last_heard, now)
            self._give_up += gap
        clashed = bool(self.clash) and not self.leader_instance
        # With hot spares a node's `start` may never come (a spare waits for a place for as long
        # as the job runs): once welcomed, node 0's own word (its heartbeats, its stop) decides.
        spare = self.coord.spares > 0 and bool(self.leader_instance)
        if (
            self.phase is MemberPhase.WAITING
            and not spare
            and (
                now >= self._give_up
                or (clashed and now - self._began >= self.coord.arrival_timeout)
            )
        ):
            self.stop_event = self._lost_leader("before the start")
            self._push(self.stop_event)
            self._out.append(Disconnect())
            self.gave_up = True
            self._enter(MemberPhase.DONE)
        elif (connected or self.started_at is not None) and (
            now - self._last_heard > self.coord.peer_timeout
        ):
            self._lost(
                f"no word from node {self.coord.leader}'s marun for {self.coord.peer_timeout:g}s"
            )
        return self._taken()

    def connected(self, now: float) -> None:
        self.tries += 1
        self.welcomed = False
        self._last_heard = now

    def connect_failed(self, error: str, clash: str = "") -> list[MemberAction]:
        """A try that did not connect; `clash`: node 0's port is another job's marun."""
        self.tries += 1
        self.last_error = error
        if clash:
            self.clash = clash
            self._say_once(clash)
        return self._taken()

    def heard(self, msg: LeaderMessage | None, now: float) -> list[MemberAction]:
        """A line of node 0's (any of the job's shows node 0 alive)."""
        self._last_heard = now
        if isinstance(msg, Welcome):
            self.leader_instance, self.welcomed = msg.instance, True
            self._out.append(Welcomed())
            if self.preflight and not self._preflight_run and self.started_at is None:
                self._preflight_run = True
                self._out.append(RunPreflight(msg.wall))
        elif isinstance(msg, Probe):
            if self.preflight and self.started_at is None:
                self._out.append(ProbeNext(msg.target))
        elif isinstance(msg, Refused):
            self.clash = f"node {self.coord.leader}'s marun refused this one: {msg.why}"
            self._say_once(self.clash)
            self.last_error = f"refused: {msg.why}"
        elif isinstance(msg, Start):
            self._on_start(msg, now)
        elif isinstance(msg, Restart) and msg.round > self.round:
            self.round = msg.round
            if self.started_at is not None and self.phase is MemberPhase.RUNNING:
                self._enter(MemberPhase.RESTARTING)
            self._push(JobEvent("restart", self.round, msg.cause))
        elif isinstance(msg, StopJob):
            # (DONE first: a spare told `done` as it left, before the job's stop went out)
            if self.stop_event is None and self.phase is not MemberPhase.DONE:
                self.stop_event = JobEvent("stop", msg.code, msg.failure)
                self._enter(MemberPhase.STOPPING)
                self._push(self.stop_event)
        elif isinstance(msg, Dump):
            # code 1: a sample for the watchdog to compare, not the dump of a hang
            self._push(JobEvent("dump", 1 if msg.sample else 0))
        elif isinstance(msg, Done):
            self.done_code = msg.code
            self._enter(MemberPhase.DONE)
        elif isinstance(msg, Place):
            self._push(JobEvent("place", msg.place))  # (marun.launch's wait for a place)
        return self._taken()

    def relay_gone(self) -> list[MemberAction]:
        """This node's relay (its slot 0's marun: marun.job.relay) is gone after it had carried
        this marun to node 0: the node is lost to the job (node 0 finds it so when the relay's
        connection closes) and nobody carries node 0's word here any more: stop now, with
        LOST_EXIT, rather than wait peer_timeout."""
        if self.done:
            return []
        coord = self.coord
        why = (
            f"node {coord.index} lost: its slot 0's marun, which carried the node's link to node "
            f"{coord.leader}, is gone"
        )
        failure = Failure(node=coord.index, exit_code=LOST_EXIT, why=why)
        self._out.append(Disconnect())
        if self.stop_event is None:
            self.stop_event = JobEvent("stop", LOST_EXIT, failure)
            self._push(self.stop_event)
        self.gave_up = True
        self._enter(MemberPhase.DONE)
        return self._taken()

    # -- the rules --------------------------------------------------------------------------

    def _on_start(self, msg: Start, now: float) -> None:
        """`start` of round 0 or of restart round k, each once; with the round's ports."""
        round_ = msg.round
        if round_ == 0 and self.started_at is not None:
            return
        if round_ and self.started_at is not None and self.phase is not MemberPhase.RESTARTING:
            return  # a reconnection's reminder of the round this node runs
        if round_ < self.round or self.phase not in (MemberPhase.WAITING, MemberPhase.RESTARTING):
            return  # (stopping or done: no start of anything now)
        self.round = round_
        self.started_at = self.started_at or now
        self._enter(MemberPhase.RUNNING)
        self._out += [Say(note) for note in msg.notes]  # (round 0: the preflight's warnings)
        ports = dict(msg.ports) if round_ else {}
        self._push(JobEvent("start", round_, ports=ports, hosts=msg.hosts))

    def _say_once(self, why: str) -> None:
        if why not in self._said:
            self._said.add(why)
            self._log("job_refused", "error", reason=why)

    def _lost_leader(self, when: str) -> JobEvent:
        coord = self.coord
        if self.clash and not self.leader_instance:  # turned away every time: say why
            why = (
                f"{self.clash}; stopped trying after arrival_timeout {coord.arrival_timeout:g}s "
                f"({self.tries} tries): two jobs on one job port (set job_port, or MA_VJ_NAME / "
                "MARUN_JOB_TOKEN per job)"
            )
        else:
            why = (
                f"node {coord.leader} ({coord.host}:{coord.port}) not reachable {when}: "
                f"{self.tries} tries over {coord.arrival_timeout + coord.peer_timeout:g}s"
                + (f", last: {self.last_error}" if self.last_error else "")
            )
        return leader_stop(coord.leader, why)

    def _lost(self, why: str) -> None:
        event = leader_stop(self.coord.leader, why)
        self._out.append(Disconnect())
        if self.stop_event is None:
            self.stop_event = event
            self._push(event)
        self.gave_up = True
        self._enter(MemberPhase.DONE)


def leader_stop(leader: int, why: str) -> JobEvent:
    """This node's own stop for node 0's loss (it never answered, or went silent)."""
    return JobEvent("stop", LOST_EXIT, Failure(node=leader, exit_code=LOST_EXIT, why=why))
