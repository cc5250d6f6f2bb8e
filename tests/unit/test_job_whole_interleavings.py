"""The whole job in every interleaving (hypothesis, stateful), made of its three pure machines and
nothing else: node 0's `JobMachine`; for each node its `MemberMachine` (the node's side of the
wire) and its `NodeMachine` (its processes: start, stop, restart rounds, the end). What the
shells do is modelled here: a connection is a `Pipe`, every line goes through
marun.job.protocol's encoding and type checks and marun.job.messages both ways, processes are
records that end when told (a rank's exit, a signal the machine asks for), the clock is the
test's. The end of a node is node_report's: it says `end` and waits for node 0's `done`.

Steps, in any order: rank exits with any code, stop signals (TERM, INT, HUP, QUIT) to any node's
marun in any phase (node 0's too), ranks that ignore the stop signal (SIGKILL after
grace_period), connections dropped (the same marun reconnects), a node's marun frozen past
peer_timeout that resumes (the same instance), a node's marun killed and one started again for
its index (a new instance), node 0's own marun frozen (1 s to past peer_timeout; thawed, its
coordinator and its member run in either order), time passing; max_restarts 0 to 3.

Invariants after every step: no machine raised, and (MARUN_STRICT_PHASES=1) no phase move
outside a machine's table; rounds <= max_restarts; node 0 never lost to itself (its own stall is
said as one); a stop signal to a node while the job is live
stops the job at once with 128+N and no round begins after it. At the end (every node let run):
every node's marun ends within a bounded time, each with the job's exit code (what node 0 told
it in `done`), and job.json says that code and every round.

The same with a hot spare (WholeJobWithSpares: 3 places and a spare, marun.job.spares): every
marun waits for its place before its node machine exists (marun.launch's `_run_placed`); a stop
signal before a place is said to node 0 (the job's failure before the start, a spare leaving
after it); invariants as above, plus one node per place; at the end a spare that left a live job
exits with its own code, and a node whose place went to a spare (told to stop) with its own.

The same with liveness hubs (WholeJobWithHubs: 4 nodes in groups of 2, node 2 the hub of node 3,
marun.plan.hubs): node 3's heartbeats through its hub or to node 0 directly, as its relay's link
decides; the hub frozen, killed, cut off from node 0, refusing links; node 0's heartbeats by its
real schedule (marun.job.beat_schedule). Invariants as above, plus: a hub's trouble makes no
other node lost, nor any give up on node 0. What it models and leaves out: its docstring.

MARUN_PROPERTY_EXAMPLES sets the example count (the fast lane's default: 200, 150 with hubs; the
slow lane runs thousands: tests/cli/test_job_interleavings_many.py).
"""

from __future__ import annotations

import os
import signal
from collections import Counter, deque
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)
from test_job_interleavings import run_interleavings

from marun.exit_codes import signal_exit
from marun.job.actions import Action, Bind, Broadcast, Drop, Refuse, Send, TurnAway
from marun.job.beat_schedule import BeatSchedule
from marun.job.heartbeat import job_interval
from marun.job.hub_link import FORWARD_PARTS, RELAY_PARTS, silent_limit
from marun.job.machine import JobMachine
from marun.job.member_machine import Disconnect, MemberAction, MemberMachine, Push
from marun.job.messages import (
    Beat,
    End,
    FailureSaid,
    Hello,
    LeaderBeat,
    LeaderMessage,
    MemberMessage,
    Refused,
    Running,
    Stopped,
    leader_message,
    member_message,
)
from marun.job.phases import JobPhase
from marun.job.protocol import PROTOCOL, ProtocolError, decode, encode, new_nonce
from marun.job.relay_side import beats_of, group_beats_of
from marun.job.report import state_report
from marun.plan.coordination import Coordination
from marun.plan.hubs import group_of, hub_of, is_hub
from marun.plan.launch_plan import ProcessSpec, Supervision
from marun.runtime.failure import Failure
from marun.runtime.node_actions import (
    NodeAction,
    ReportFailure,
    ReportRunning,
    ReportStopped,
    Restart,
    SignalAll,
    SignalRound,
    StartRound,
)
from marun.runtime.node_machine import NodeMachine
from marun.runtime.phase import LIVE
from marun.runtime.reaper import Ending
from marun.runtime.result import JobRecord, ProcessRecord
from marun.runtime.round_rule import RoundRule

SECRET = b"whole-job"
JOB = "job-w"
NODES = 3
RANKS = 2  # per node
MAX_NODES = NODES + 1  # the rules' draws (a spare's job has one node more)
PEER_TIMEOUT = 10.0
ARRIVAL_TIMEOUT = 30.0
GRACE = 5.0
WALL = 1.7e9
# Fake seconds the job may take to end once every node is let run: arrival_timeout (a round
# waiting for a node that never comes back), peer_timeout (a silent one), grace and SIGKILL.
SETTLE = ARRIVAL_TIMEOUT + 3 * PEER_TIMEOUT + 2 * GRACE + 60.0
STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
CLOSED = b""  # in node 0's queue: the connection's close, seen once node 0 runs again


def _coord(index: int, nodes: int = NODES, spares: int = 0, hub_group: int = 0) -> Coordination:
    return Coordination(
        host="127.0.0.1",
        port=0,
        nodes=nodes,
        index=index,
        job=JOB,
        spares=spares,
        arrival_timeout=ARRIVAL_TIMEOUT,
        peer_timeout=PEER_TIMEOUT,
        hub_group=hub_group,
        hub_hosts=tuple(f"h{h}" for h in range(hub_group, nodes, hub_group)) if hub_group else (),
    )


class Pipe:
    """One connection between a node's marun and node 0's."""

    def __init__(self, marun: Marun) -> None:
        self.marun = marun
        self.open = True
        # What node 0's port keeps of it (marun.job.conns.Conn) for its heartbeat schedule
        # (marun.job.beat_schedule), read where liveness hubs are (WholeJobWithHubs)
        self.member: tuple[int, int] | None = None  # bound: its hello was taken
        self.node: int | None = None
        self.last_out = 0.0  # node 0's last line out on it
        self.beating = False  # in the schedule
        self.closing = False
        self.via_hub: Pipe | None = None  # the hub that spoke for its node lately, and when
        self.via_at = 0.0
        self.children: set[Pipe] = set()  # a hub's: the nodes it spoke for


class Marun:
    """One marun process for node `index`: its two machines, its processes and its connection.
    With hot spares its node machine is made once node 0 gives it a place (marun.launch's
    `_run_placed`); until then it runs nothing."""

    def __init__(self, index: int, budget: int, now: float, coord: Coordination) -> None:
        self.index = index
        self.budget = budget
        self.instance = new_nonce()
        self.member = MemberMachine(coord, now)
        self.place: int | None = None
        self.node: NodeMachine = None  # type: ignore[assignment]  # (made below, or at a place)
        self.record: JobRecord = None  # type: ignore[assignment]
        self.alive: set[int] = set()  # records whose process runs
        self.exits: list[tuple[int, Ending]] = []  # ended, not yet reaped
        self.stubborn = False  # its ranks ignore the stop signal (SIGKILL ends them)
        self.pipe: Pipe | None = None
        self.said: dict[str, MemberMessage] = {}  # said again after every hello
        self.frozen = False
        self.ending = False  # said `end`: waits for node 0's `done`
        self.own: int | None = None  # a marun without a place: the code it leaves with
        self.code: int | None = None  # its exit code, once its marun has exited
        self.pid = 100 * (index + 1)
        if not coord.spares:
            self.make_node(index, now)

    def make_node(self, place: int, now: float) -> None:
        self.place = place
        records = [
            ProcessRecord(
                spec=ProcessSpec(
                    f"rank{RANKS * place + r}",
                    ("python", "t.py"),
                    {},
                    "/w",
                    "/l",
                    rank=RANKS * place + r,
                ),
                tail=deque(),
            )
            for r in range(RANKS)
        ]
        self.record = JobRecord("pytorch", place, f"h{self.index}", records)
        options = Supervision(grace_period=GRACE, max_restarts=self.budget)
        self.node = NodeMachine(self.record, options, now=now)


class WholeJob(RuleBasedStateMachine):
    nodes, spares = NODES, 0  # (WholeJobWithSpares: 3 places and a spare)

    @initialize(budget=st.integers(0, 3))
    def make_job(self, budget: int) -> None:
        self.budget = budget
        self.now = 1000.0
        rule_ = RoundRule(budget, quick=0.0)
        coord = self._coord_of(0)
        self.job = JobMachine(coord, "leader", rule=rule_, ports={}, now=self.now, wall=WALL)
        self.to_leader: deque[tuple[Pipe, bytes]] = deque()
        self.maruns = [self._marun(i) for i in range(self.nodes)]
        self.gone: list[Marun] = []  # maruns killed (their codes are not the job's)
        self.signalled: tuple[int, int] | None = None  # (128+N, rounds then)
        self.interrupted: set[Marun] = set()  # stopped while waiting for the job's end
        self.left: set[Marun] = set()  # maruns signalled before they had a place
        # Node 0's own marun frozen (SIGSTOP): it neither reads, ticks nor beats; closes wait.
        self.leader_frozen = False
        self.last_beat = self.now  # node 0's last heartbeat out (its shell's schedule)
        self._settle()

    def _coord_of(self, index: int) -> Coordination:
        return _coord(index, self.nodes, self.spares)

    def _marun(self, index: int) -> Marun:
        return Marun(index, self.budget, self.now, self._coord_of(index))

    # -- the wire -------------------------------------------------------------------------------

    def _say(self, marun: Marun, message: MemberMessage, **protocol: str) -> None:
        """What a node's marun says (its state said again after the next hello, as member.py)."""
        if message.KIND in (FailureSaid.KIND, Stopped.KIND, Running.KIND, End.KIND):
            marun.said.pop(message.KIND, None)
            marun.said[message.KIND] = message
        pipe = marun.pipe
        if pipe is None or not pipe.open:
            return
        body = {"job": JOB, "node": marun.index, "slot": 0, "type": message.KIND}
        body.update(message.to_wire(), **protocol)
        self.to_leader.append((pipe, encode(SECRET, body)))

    def _to_member(self, pipe: Pipe, message: LeaderMessage) -> None:
        if not pipe.open:
            return
        body = {"job": JOB, "node": 0, "slot": 0, "type": message.KIND}
        body.update(message.to_wire())
        marun = pipe.marun
        marun_inbox = self.inboxes.setdefault(id(marun), deque())
        marun_inbox.append((pipe, encode(SECRET, body)))

    def _leader_hears(self, pipe: Pipe, line: bytes) -> None:
        if line == CLOSED:
            self._leader_closed(pipe)
            return
        if not pipe.open:
            return
        try:
            body = decode(SECRET, JOB, line)
        except ProtocolError:
            self._close(pipe)
            return
        self._leader_takes(pipe, body)

    def _leader_takes(self, pipe: Pipe, body: dict[str, Any]) -> None:
        msg = member_message(body)
        if isinstance(msg, Hello):
            actions = self.job.hello(pipe, "127.0.0.1", msg, self.now, WALL + self.now)
        else:
            key = (int(body["node"]), int(body["slot"]))
            actions = self.job.message(pipe, key, str(body["type"]), msg, self.now, WALL + self.now)
        self._leader_does(actions)

    def _leader_does(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                member = self.job.job.members.get(action.key)
                if member is not None and isinstance(member.conn, Pipe):
                    self._to_member(member.conn, action.message)
            elif isinstance(action, Broadcast):
                for member in list(self.job.job.members.values()):
                    if isinstance(member.conn, Pipe):
                        self._to_member(member.conn, action.message)
            elif isinstance(action, TurnAway) and isinstance(action.handle, Pipe):
                self._to_member(action.handle, Refused(action.why))
                self._close(action.handle)
            elif isinstance(action, (Drop, Refuse)) and isinstance(action.handle, Pipe):  # noqa: SIM102
                if isinstance(action, Drop) or action.close:
                    self._close(action.handle)

    def _close(self, pipe: Pipe) -> None:
        """Either end closes: node 0's machine hears of it once; the member sees it at once."""
        if not pipe.open:
            return
        pipe.open = False
        if self.leader_frozen:  # node 0 sees the close once it runs again
            self.to_leader.append((pipe, CLOSED))
        else:
            self._leader_closed(pipe)
        if pipe.marun.pipe is pipe:
            pipe.marun.pipe = None

    def _leader_closed(self, pipe: Pipe) -> None:
        """Node 0 finds the connection closed."""
        self.job.closed(pipe, self.now)

    def _connect(self, marun: Marun) -> None:
        marun.pipe = Pipe(marun)
        marun.member.connected(self.now)
        hello = Hello(
            node=marun.index, slot=0, instance=marun.instance, host=f"h{marun.index}",
            leader=marun.member.leader_instance, started=marun.member.started_at is not None,
            daemons_only=False, version=PROTOCOL,
        )  # fmt: skip
        self._say(marun, hello, nonce=new_nonce())
        for message in list(marun.said.values()):
            self._say(marun, message)

    # -- a node's shells ------------------------------------------------------------------------

    def _member_does(self, marun: Marun, actions: list[MemberAction]) -> None:
        for action in actions:
            if isinstance(action, Push) and marun.node is None:
                self._placeless(marun, action.event.kind, action.event.code)
            elif isinstance(action, Push):
                self._node_does(marun, marun.node.heard([action.event], self.now, WALL + self.now))
            elif isinstance(action, Disconnect) and marun.pipe is not None:
                self._close(marun.pipe)

    def _placeless(self, marun: Marun, kind: str, code: int) -> None:
        """marun.launch's `_run_placed` until a place: a place makes its node machine, the job's
        stop ends it (it ran nothing); the rest is not for a node without processes."""
        if marun.ending:
            return
        if kind == "place":
            marun.make_node(code, self.now)
        elif kind == "stop":  # (its code: the stop's, as a node that ran nothing)
            marun.ending, marun.own = True, code
            self._say(marun, End("spare", code))

    def _node_does(self, marun: Marun, actions: list[NodeAction]) -> None:
        todo = list(actions)
        while todo:
            action = todo.pop(0)
            more: list[NodeAction] = []
            if isinstance(action, StartRound):
                for index in action.indexes:
                    self._start(marun, index)
                more = marun.node.round_started(len(action.indexes), self.now)
            elif isinstance(action, Restart):
                self._start(marun, action.index)
            elif isinstance(action, (SignalAll, SignalRound)):
                for index in sorted(marun.alive):
                    rec = marun.record.processes[index]
                    rec.stopped_by = action.signum
                    if action.signum == signal.SIGKILL or not marun.stubborn:
                        marun.alive.discard(index)
                        ending = Ending(signal_exit(action.signum), action.signum)
                        marun.exits.append((index, ending))
            elif isinstance(action, ReportFailure):
                failure = action.failure.but(node=marun.index, host=f"h{marun.index}")
                self._say(marun, FailureSaid(failure, marun.member.round, action.uptime))
            elif isinstance(action, ReportStopped):
                self._say(marun, Stopped(action.round))
            elif isinstance(action, ReportRunning):
                self._say(marun, Running(action.round, action.ranks))
            todo[:0] = more

    def _start(self, marun: Marun, index: int) -> None:
        rec = marun.record.processes[index]
        marun.pid += 1
        rec.pids.append(marun.pid)
        rec.ending = None
        rec.stopped_by = None
        marun.alive.add(index)
        marun.node.started(index)

    def _reap(self, marun: Marun) -> None:
        exits, marun.exits = marun.exits, []
        for index, ending in exits:
            marun.record.processes[index].ending = ending
            self._node_does(marun, marun.node.exited(index, self.now))

    def _turn(self, marun: Marun) -> None:
        """One turn of a node's marun: its member's loop, its supervisor's loop, its end."""
        if marun.code is not None or marun.frozen:
            return
        member = marun.member
        if marun.pipe is None and not member.gave_up and not member.done:
            self._connect(marun)
        self._member_does(marun, member.turn(self.now, connected=marun.pipe is not None))
        self._beats_out(marun)
        self._deliver(marun)
        if marun.ending:
            if member.done or member.gave_up:
                code = member.done_code
                own = marun.record.exit_code if marun.node is not None else marun.own
                self._exit(marun, (own or 0) if code is None else code)
            return
        if marun.node is None:
            return  # (waits for a place)
        self._reap(marun)
        left = tuple(sorted(marun.alive)) if marun.node.phase.name == "RESTARTING" else ()
        self._node_does(marun, marun.node.tick(self.now, bool(marun.alive), left))
        if marun.node.finished():
            marun.ending = True
            self._say(marun, End(marun.record.outcome, marun.record.exit_code))

    def _beats_out(self, marun: Marun) -> None:
        """Its heartbeat to node 0 (every turn: more often than the job's interval)."""
        if marun.pipe is not None:
            self._say(marun, Beat(0.0, None, None))

    def _exit(self, marun: Marun, code: int) -> None:
        marun.code = code
        if marun.pipe is not None:
            self._close(marun.pipe)

    def _deliver(self, marun: Marun) -> None:
        box = self.inboxes.get(id(marun))
        while box and not marun.frozen and marun.code is None:
            pipe, line = box.popleft()
            if not pipe.open and pipe is not marun.pipe:
                continue
            try:
                body = decode(SECRET, JOB, line)
            except ProtocolError:
                continue
            self._heard_node0(marun)
            self._member_does(marun, marun.member.heard(leader_message(body), self.now))

    def _heard_node0(self, marun: Marun) -> None:
        """A line of node 0's came to `marun` (a hub hands node 0's liveness on: WithHubs)."""

    def _settle(self) -> None:
        """Every line in flight delivered, both ways (the network is fast; time stands)."""
        for _ in range(50):
            moved = False
            while self.to_leader and not self.leader_frozen:
                moved = True
                self._leader_hears(*self.to_leader.popleft())
            for marun in self.maruns:
                if self.inboxes.get(id(marun)) and not marun.frozen and marun.code is None:
                    moved = True
                    self._deliver(marun)
            moved = self._links_move() or moved
            if not moved:
                return

    def _links_move(self) -> bool:
        """Lines between the nodes themselves (liveness hubs' links: WholeJobWithHubs)."""
        return False

    @property
    def inboxes(self) -> dict[int, deque[tuple[Pipe, bytes]]]:
        if not hasattr(self, "_inboxes"):
            self._inboxes: dict[int, deque[tuple[Pipe, bytes]]] = {}
        return self._inboxes

    def _advance(self, seconds: float) -> None:
        left = seconds
        while left > 1e-9:
            dt = min(0.5, left)
            left -= dt
            self.now += dt
            for marun in self.maruns:
                self._turn(marun)
                self._settle()
            if self.leader_frozen:
                continue
            self._leader_does(self.job.tick(self.now, WALL + self.now))
            self._leader_beats()
            self._settle()

    def _leader_beats(self) -> None:
        """Node 0's heartbeats are its shell's (marun.job.wire's schedule): here one each turn,
        to every member."""
        self._leader_does([Broadcast(LeaderBeat())])
        self.last_beat = self.now

    def _unheard(self) -> float:
        """The shell's, after node 0's own stall: the oldest last line out to a member whose
        hello node 0 took (none: 0)."""
        bound = any(isinstance(m.conn, Pipe) for m in self.job.job.members.values())
        return self.now - self.last_beat if bound else 0.0

    # -- the steps ------------------------------------------------------------------------------

    @rule(
        index=st.integers(0, MAX_NODES - 1),
        rank=st.integers(0, RANKS - 1),
        code=st.sampled_from([0, 1, 3, 137]),
    )
    def a_rank_exits(self, index: int, rank: int, code: int) -> None:
        marun = self.maruns[index % len(self.maruns)]
        if marun.code is None and rank in marun.alive:
            marun.alive.discard(rank)
            ending = Ending(code, signal.SIGKILL if code == 137 else None)
            marun.exits.append((rank, ending))

    @rule(index=st.integers(0, MAX_NODES - 1), signum=st.sampled_from(STOPS))
    def a_stop_signal(self, index: int, signum: int) -> None:
        marun = self.maruns[index % len(self.maruns)]
        if marun.code is not None or marun.frozen:
            return
        if marun.node is None:
            # (marun.launch's `_run_placed`: its wait for the job's end is not interrupted)
            if not marun.ending:
                self._placeless_signal(marun, signum)
            return
        if marun.ending:  # node_report's wait for the end, interrupted: its own code, now
            self._exit(marun, marun.record.exit_code or signal_exit(signum))
            self.interrupted.add(marun)
            self._settle()
            return
        job = self.job.job
        live = job.stopped is None and job.phase is not JobPhase.DONE
        heard = marun.pipe is not None and marun.node.phase in LIVE and job.start_sent
        before = len(job.rounds)
        member = job.members.get((marun.index, 0))
        # With spares, a node that holds a place (not node 0) leaves it (its pod deleted): a
        # round gives the place to a spare, or the job stops with 128+N where none can follow.
        leaves = (
            self.spares > 0
            and live
            and heard
            and member is not None
            and member.place is not None
            and marun.index != 0
        )
        restarting = job.phase is JobPhase.RESTARTING
        self._node_does(marun, marun.node.signals([signum], self.now))
        self._settle()
        if leaves:
            marun.own = signal_exit(signum)
            self.left.add(marun)  # (its own code, or the job's: checked at the end)
            self._left_its_place(signum, before, restarting)
            return
        if live and heard and self.signalled is None:
            self.signalled = (signal_exit(signum), before)
            assert job.stopped is not None and job.stopped.code == signal_exit(signum), (
                "a stop signal did not stop the job at once with 128+N"
            )

    @rule(index=st.integers(0, MAX_NODES - 1))
    def its_ranks_ignore_the_stop_signal(self, index: int) -> None:
        self.maruns[index % len(self.maruns)].stubborn = True

    @rule(index=st.integers(1, MAX_NODES - 1))
    def a_connection_drops(self, index: int) -> None:
        marun = self.maruns[self._not_0(index)]
        if marun.pipe is not None and not marun.frozen:
            self._close(marun.pipe)

    @rule(index=st.integers(1, MAX_NODES - 1))
    def freeze(self, index: int) -> None:
        marun = self.maruns[self._not_0(index)]
        if marun.code is None:
            marun.frozen = True

    @rule(
        seconds=st.sampled_from([1.0, 2.0, 2.5, 4.0, 9.5, 12.0]),
        member_first=st.booleans(),
    )
    def node_0_is_frozen(self, seconds: float, member_first: bool) -> None:
        """Node 0's marun stopped (SIGSTOP) then continued: its coordinator and its own member
        stand still; the others run on, and give up on node 0 after peer_timeout without a line
        of it. Thawed, its two threads run in either order."""
        own = self.maruns[0]
        if own.code is not None:
            return
        own.frozen = self.leader_frozen = True
        self._advance(seconds)
        self.leader_frozen = False
        if member_first:
            own.frozen = False
            self._turn(own)
        unheard = self._unheard()
        self._leader_does(self.job.stalled(seconds, unheard, self.now, WALL + self.now))
        self._settle()
        own.frozen = False
        self._turn(own)
        self._settle()

    @rule(index=st.integers(1, MAX_NODES - 1))
    def resume(self, index: int) -> None:
        marun = self.maruns[self._not_0(index)]
        if marun.frozen:
            marun.frozen = False
            self._turn(marun)
            self._settle()

    @rule(index=st.integers(1, MAX_NODES - 1))
    def its_marun_is_killed_and_started_again(self, index: int) -> None:
        """Its pod deleted and recreated: the processes and the connection go, and a new marun
        comes for the index (a new instance)."""
        index = self._not_0(index)
        old = self.maruns[index]
        if old.code is None:
            old.code = -9
            old.alive.clear()
            if old.pipe is not None:
                self._close(old.pipe)
        self.gone.append(old)
        self.maruns[index] = self._marun(index)
        self._settle()

    def _not_0(self, index: int) -> int:
        """A node other than node 0, from a draw of 1 to MAX_NODES - 1."""
        return 1 + (index - 1) % (len(self.maruns) - 1)

    def _left_its_place(self, signum: int, before: int, restarting: bool) -> None:
        """A node left its place on a stop signal: a round follows (or the one under way gives
        the place away), or, where none can, the job stops with 128+N as without spares."""
        job = self.job.job
        rounds = len(job.rounds) - before
        stopped = job.stopped is not None and job.stopped.code == signal_exit(signum)
        assert stopped or rounds == 1 or (restarting and rounds == 0), (
            "a node that left its place started no round and did not stop the job"
        )
        if stopped and rounds == 0 and self.signalled is None:
            self.signalled = (signal_exit(signum), before)

    def _placeless_signal(self, marun: Marun, signum: int) -> None:
        """A stop signal to a marun that has no place yet: it says so to node 0, as marun.launch's
        `_run_placed` does, and leaves with 128+N. Before the start that is the job's failure
        (as without spares); after it, a spare leaves and the job goes on."""
        job = self.job.job
        member = job.members.get((marun.index, 0))
        live = job.stopped is None and job.phase is not JobPhase.DONE and marun.pipe is not None
        holds = member is not None and member.place is not None
        # After the start, a node given a place (not node 0) leaves it, as one that runs does.
        leaves = live and job.start_sent and holds and marun.index != 0
        stops_the_job = live and (not job.start_sent or holds) and not leaves
        restarting = job.phase is JobPhase.RESTARTING
        before = len(job.rounds)
        name = signal.Signals(signum).name
        failure = Failure(
            node=marun.index, exit_code=signal_exit(signum), signal=name, stop_signal=name
        )
        marun.ending, marun.own = True, signal_exit(signum)
        self._say(marun, FailureSaid(failure, marun.member.round, None))
        self._say(marun, End("spare", signal_exit(signum)))
        self._settle()
        if leaves:
            self._left_its_place(signum, before, restarting)
        if stops_the_job and self.signalled is None:
            self.signalled = (signal_exit(signum), before)
            assert job.stopped is not None and job.stopped.code == signal_exit(signum)
        self.left.add(marun)  # (its own code, or the job's: checked at the end)

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0, 11.0, 31.0]))
    def time_passes(self, seconds: float) -> None:
        self._advance(seconds)

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def rounds_within_the_budget(self) -> None:
        if hasattr(self, "job"):
            assert len(self.job.job.rounds) <= self.budget

    @invariant()
    def node_0_is_never_lost_to_itself(self) -> None:
        """Its slot freezes with it: node 0's own stall is said as such (`did not run for`)."""
        failure = self.job.job.first_failure if hasattr(self, "job") else None
        if failure is not None and failure.node == 0:
            assert " lost: " not in (failure.why or ""), failure.why

    @invariant()
    def no_round_after_a_stop_signal(self) -> None:
        if getattr(self, "signalled", None) is not None:
            assert self.signalled is not None
            assert len(self.job.job.rounds) == self.signalled[1], "a round began after a signal"

    def teardown(self) -> None:
        if not hasattr(self, "job"):
            return
        self.leader_frozen = False
        for marun in self.maruns:
            marun.frozen = False
            marun.stubborn = False
        holders = set()
        waited = 0.0
        # At least one tick: the job's end is found on node 0's next tick, also when every
        # marun has already exited (the last `end` came in between ticks).
        self._advance(1.0)
        # (and until node 0's machine is done: nodes that never arrived, having given up on a
        # frozen node 0, are waited for LATE_WAIT after the stop, also once every marun exited)
        while (
            any(m.code is None for m in self.maruns) or self.job.job.phase is not JobPhase.DONE
        ) and waited < SETTLE:
            self._advance(1.0)
            waited += 1.0
            for marun in self.maruns:  # the training ends: every rank that runs exits 0
                for index in sorted(marun.alive):
                    self.a_rank_exits(marun.index, index, 0)
        job = self.job.job
        for m in self.maruns:
            member = job.members.get((m.index, 0))
            if member is not None and member.lost_place is not None and member.place is None:
                holders.add(m)  # its place went to a spare: told to stop, its own code
            elif member is not None and member.leaving:
                holders.add(m)  # it left its place on a stop signal node 0 heard late: its own
        # Gave up on node 0 (frozen past peer_timeout): it left with its own code, never 0.
        gave_up = {m for m in self.maruns if m.member.gave_up}
        for m in gave_up:
            assert m.code not in (None, 0), (m.index, m.code)
        own = self.interrupted | self.left | holders | gave_up
        codes = {m.index: m.code for m in self.maruns if m not in own}
        for m in self.left & set(self.maruns):  # left a live job: its own code; else the job's
            assert m.code in (job.exit_code, m.own), (m.index, m.code, m.own, job.exit_code)
        assert all(code is not None for code in codes.values()), (
            f"maruns still running {SETTLE:g}s after they were let run: {codes}, job {job.phase}"
        )
        assert job.phase is JobPhase.DONE, job.phase
        assert set(codes.values()) <= {job.exit_code}, (codes, job.exit_code)
        assert all(m.code is not None for m in self.maruns)
        if self.signalled is not None:
            assert job.exit_code == self.signalled[0]
        report: dict[str, Any] = state_report(job, 0)
        assert report["exit_code"] == job.exit_code and report["round"] == len(job.rounds)


class WholeJobWithSpares(WholeJob):
    """The same job with hot spares (marun.job.spares): 3 places and 1 spare; every marun
    waits for its place before its node machine exists."""

    nodes, spares = NODES + 1, 1

    @invariant()
    def each_place_has_one_node(self) -> None:
        if hasattr(self, "job"):
            places = self.job.job.places
            assert len(set(places.values())) == len(places) == NODES
            holding = [m.place for m in self.job.job.members.values() if m.place is not None]
            assert len(holding) == len(set(holding)), holding


GROUP = 2  # WholeJobWithHubs: 4 nodes in groups of 2: node 0's own (0, 1), hub 2's (2, 3)
EVERY = job_interval(_coord(0, MAX_NODES))  # the job's heartbeat interval (1 s: a small job)
SILENT = silent_limit(EVERY, PEER_TIMEOUT)  # a group node leaves a hub silent this long
HUB_WAIT = 2.0 + EVERY / FORWARD_PARTS  # a link without the hub's challenge this long is left


class Link:
    """A group node's link to its hub: HubLink's side (the node's relay) and HubServer's side
    (the hub's relay) of one connection, with the lines in flight each way (marun.job.hub_link).
    """

    def __init__(self, child: HubMarun, hub: HubMarun, now: float) -> None:
        self.child, self.hub = child, hub
        self.pipe = child.pipe  # the node's connection to node 0 it was made under
        self.closed_by: str | None = None  # "child", "hub" or "net" (a reset): seen when read
        self.accepted = False  # the hub took it and sent its challenge
        self.ready = False  # the node read the challenge and said `hublink`: its beats go here
        self.registered = False  # the hub read the `hublink`: node 0's liveness goes down it
        self.deadline = now + HUB_WAIT
        self.last_in = now  # the node's last line from the hub
        self.up: deque[list[Any] | None] = deque()  # `hublink` (None), then `beats` lines
        self.down: deque[str] = deque()  # "challenge", then "hb" (node 0's) and "hubbeat"


class HubMarun(Marun):
    """A marun of a job with liveness hubs: its relay is its group's hub (HubServer's state), or
    links to its hub (HubLink's), or neither (group 0's nodes)."""

    def __init__(self, index: int, budget: int, now: float, coord: Coordination) -> None:
        super().__init__(index, budget, now, coord)
        self.is_hub = is_hub(coord, index)
        self.hub = hub_of(coord, index)
        # the hub's: its links, each node's entry of its next `groupbeats` line, its pace
        self.links: list[Link] = []
        self.entries: dict[int, list[Any]] = {}
        self.next_forward = now + EVERY / FORWARD_PARTS
        self.relayed = self.said_at = 0.0
        self.up_lost = False  # its connection to node 0 closed while it was frozen: seen later
        # a group node's: its link, and when it tries the hub again
        self.link: Link | None = None
        self.next_try = 0.0


class WholeJobWithHubs(WholeJob):
    """The same job with liveness hubs (marun.plan.hubs, hub_group 2): 4 nodes; nodes 0 and 1
    (group 0) beat node 0 directly, node 2 is the hub of node 3 (and beats node 0 directly
    itself). The relays are modelled from marun.job.relay and marun.job.hub_link, node 0's port
    from marun.job.wire and marun.job.coordinator; node 0's heartbeats out are the real
    marun.job.beat_schedule.BeatSchedule's; the hub's `groupbeats` line is signed, decoded,
    checked by the real parser (marun.job.relay_side.group_beats_of) and taken by
    JobMachine.group_beats.

    - Node 3 links to its hub once node 0 has welcomed it on its own connection, and sends its
      heartbeat through the link while the link is ready, else to node 0 directly. It leaves
      the link on any trouble: no challenge within 2 1/8 s, the hub silent for `silent_limit`
      (3.9 s here), the link closed or reset, the hub gone, its own connection to node 0 gone.
      It tries the hub again `retry` intervals later (drawn once per interleaving: 1, 1.5 or
      2, where HubLink.drop draws uniform(1, 2) each time).
    - The hub challenges each link, takes its `hublink` (closing an older link of the same
      node) and then its `beats`, keeps each node's entry of its next line (HubServer._take),
      and hands them to node 0 in one `groupbeats` line at its pace, only while node 0 has
      welcomed it (else it closes every link). It hands node 0's liveness down each link as
      `hb` at each line of node 0's (at most every quarter interval), and sends a `hubbeat`
      where it said nothing for a quarter interval. When its connection to node 0 closes, it
      closes every link (a frozen hub once it runs again).
    - Node 0 takes the line as the hub's: each entry on the lane the member holds; one without
      a lane is passed over. It sends no heartbeat of its own to a node its hub spoke for
      within 1 1/2 intervals. It beats such a node directly at once when the node beats node 0
      itself again or the hub's connection closes. It judges its own stall by the schedule's
      `unheard`.

    Steps besides the base's, which reach the hub as any node (frozen, killed and started
    again: what it held is lost and its links close; its connection to node 0 dropped): the hub
    frozen a while (below SILENT; past SILENT, where its group leaves it; past peer_timeout,
    where node 0 finds it lost), thawed: what waited in its sockets handed on, stale; node 3's
    link reset; the hub's port refusing new links (a firewall, its port taken) or taking them
    again. Half the interleavings start with the job running and node 3 linked (`linked`).
    Invariants: the base's; node 0 never refuses a hub's line; a node found lost is not counted
    back by its hub's word (which may be old: a hub thawed hands on what waited in its sockets),
    only by its own line; and a hub's trouble costs no
    other node: while node 0 was never frozen, every node found lost (at any moment, not only
    after a step) or that gave up on node 0 was itself frozen or killed.

    Left out:
    - Slots. One marun per node stands for its relay and its slot 0 (a job of one slot has no
      relay, hence no hubs; the machines do not tell the difference). The node's heartbeat is
      its slot's `hb`, which node 0 takes by JobMachine.message where a relay's `beats` entry
      goes by JobMachine.beats (both `_beat`).
    - The real paces. Every marun and relay turns every 0.5 s: a node beats every turn, and
      the hub hands on every turn, not every eighth of an interval.
    - A link cut without a reset (only its silence, which a frozen hub gives).
    - More than one group, the hub's limits (most links, HELLO_WAIT), resolving the hub's name,
      and hot spares with hubs.
    - A hub's old word about a node not yet found lost: it refreshes the node (node 0 cannot
      tell its age), which may find a node frozen meanwhile lost later by up to the hub's own
      freeze (docs/supervision.md, "Liveness through hubs")."""

    nodes, spares = MAX_NODES, 0
    retry = 1.5  # intervals before a node tries its hub again (random.uniform(1, 2) there)

    def __init__(self) -> None:
        super().__init__()
        self.conns: set[Pipe] = set()  # node 0's port's, bound, whose close it has not seen
        # node 0's real schedule, over the model's connections (a Pipe has what it reads of a
        # Conn): its heartbeat to one, live while node 0 holds it
        beat, live = self._leader_hb, self.conns.__contains__
        self.schedule = BeatSchedule(EVERY, live, beat)  # type: ignore[arg-type]
        self.hub_refuses = False
        self.node_0_froze = False
        self.troubled: set[int] = set()  # nodes frozen or killed at some step
        self.lost: set[int] = set()  # nodes node 0 found lost at some point

    @initialize(
        budget=st.integers(0, 3), retry=st.sampled_from([1.0, 1.5, 2.0]), linked=st.booleans()
    )
    def make_job(self, budget: int, retry: float = 1.5, linked: bool = False) -> None:
        """`retry`: intervals before node 3 tries its hub again (random.uniform(1, 2) in
        HubLink.drop); `linked`: the job let run first until node 3 beats through its hub (the
        hub's troubles matter once it carries beats: half the interleavings start there)."""
        self.retry = retry
        super().make_job(budget)
        if linked:
            self._advance(1.5)

    def _coord_of(self, index: int) -> Coordination:
        return _coord(index, self.nodes, self.spares, hub_group=GROUP)

    def _marun(self, index: int) -> Marun:
        return HubMarun(index, self.budget, self.now, self._coord_of(index))

    # -- node 0's side (marun.job.wire, marun.job.coordinator) ---------------------------------

    def _leader_does(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Bind) and isinstance(action.handle, Pipe):
                pipe = action.handle  # (JobPort.bind)
                pipe.member = pipe.member or action.key
                pipe.node = action.key[0] if pipe.node is None else pipe.node
                self.conns.add(pipe)
        super()._leader_does(actions)
        # (every node found lost, as it is found: one counted back at its next line leaves no
        # trace in the roster by the end of the step)
        for member in self.job.job.members.values():
            if member.outcome == "lost":
                self.lost.add(member.node)

    def _to_member(self, pipe: Pipe, message: LeaderMessage) -> None:
        """JobPort.send_signed: any line shows node 0 alive; a member's connection is in the
        heartbeat schedule from its first line on (spread over an interval there)."""
        if not pipe.open:
            return
        super()._to_member(pipe, message)
        pipe.last_out = self.now
        if not pipe.beating and pipe.member is not None and pipe in self.conns:
            self.schedule.schedule(pipe, self.now + EVERY / 2)  # type: ignore[arg-type]

    def _leader_hb(self, pipe: Pipe) -> None:
        self._to_member(pipe, LeaderBeat())

    def _leader_beats(self) -> None:
        self.schedule.due(self.now)

    def _unheard(self) -> float:
        return self.schedule.unheard(self.conns, self.now)  # type: ignore[arg-type]

    def _leader_closed(self, pipe: Pipe) -> None:
        super()._leader_closed(pipe)
        self.conns.discard(pipe)
        self.schedule.gone(pipe, self.now)  # type: ignore[arg-type]  # (a hub: its group direct)

    def _leader_takes(self, pipe: Pipe, body: dict[str, Any]) -> None:
        if body["type"] == "groupbeats":
            self._group_beats(pipe, body)
            return
        if body["type"] == "hb" and pipe.via_hub is not None:  # its own beat: node 0's go direct
            self.schedule.direct(pipe, self.now)  # type: ignore[arg-type]
        super()._leader_takes(pipe, body)

    def _group_beats(self, hub: Pipe, body: dict[str, Any]) -> None:
        coord = self.job.job.coord
        # (checked_line: a line of the connection's own node, a hub, entries of its group only)
        assert hub.node is not None and is_hub(coord, hub.node) and body["node"] == hub.node, (
            f"node 0 refuses a groupbeats line of node {body['node']} on node {hub.node}'s"
        )
        try:
            entries = group_beats_of(body["nodes"], group_of(coord, hub.node), coord.slots)
        except ValueError as exc:
            raise AssertionError(f"node 0 refuses a hub's line: {exc}") from None
        members = self.job.job.members
        lost = [
            (node, slot)
            for node, idles, _, _ in entries
            for slot, idle in enumerate(idles)
            if idle is not None and members.get((node, slot)) is not None
            and members[(node, slot)].outcome == "lost"
        ]  # fmt: skip
        actions, lanes = self.job.group_beats(entries, self.now, WALL + self.now)
        # A hub's word may be old (it was frozen with the beats in its sockets): only the node's
        # own line counts a lost node back.
        assert all(members[key].outcome == "lost" for key in lost), f"{lost} back by a hub"
        for lane in set(lanes):
            if lane is not hub and isinstance(lane, Pipe):
                self.schedule.via(lane, hub, self.now)  # type: ignore[arg-type]
        HUB_SEEN["groupbeats"] += 1
        self._leader_does(actions)

    # -- the relays' side (marun.job.relay, marun.job.hub_link) ----------------------------------

    def _close(self, pipe: Pipe) -> None:
        """A node's connection to node 0 closed: a hub closes its links, a group node leaves
        its link (Relay._up_lost), once its relay runs."""
        marun = pipe.marun
        current = pipe.open and marun.pipe is pipe
        super()._close(pipe)
        if not current or not isinstance(marun, HubMarun) or marun.code is not None:
            return
        if marun.is_hub:
            if marun.frozen:
                marun.up_lost = True
            else:
                self._close_links(marun)
        elif marun.link is not None and not marun.frozen:
            self._leave(marun)

    def _beats_out(self, marun: Marun) -> None:
        """The relay's turn: what its links brought, then its tick (the hub's pace, the link's
        checks), then its node's heartbeat: through the hub while its link is ready."""
        assert isinstance(marun, HubMarun)
        if marun.is_hub:
            self._hub_reads(marun)
            self._hub_tick(marun)
        elif marun.hub is not None:
            self._link_reads(marun)
            self._link_tick(marun)
        if marun.pipe is None:
            return
        link = marun.link
        if link is not None and link.ready:
            link.up.append([[0, 0.0, None, None]])  # (its `beats`: [slot, idle, cpu, steps])
            return
        if marun.hub is not None:
            HUB_SEEN["direct"] += 1
        self._say(marun, Beat(0.0, None, None))

    def _heard_node0(self, marun: Marun) -> None:
        """HubServer.heard_node0: node 0's liveness down every link, at most every quarter
        interval."""
        if not isinstance(marun, HubMarun) or not marun.is_hub:
            return
        if self.now - marun.relayed < EVERY / RELAY_PARTS:
            return
        marun.relayed = self.now
        self._to_group(marun, "hb")

    def _to_group(self, hub: HubMarun, kind: str) -> None:
        hub.said_at = self.now
        for link in hub.links:
            if link.registered and link.closed_by is None:
                link.down.append(kind)

    def _close_links(self, hub: HubMarun) -> None:
        for link in hub.links:
            link.closed_by = link.closed_by or "hub"
        hub.links, hub.entries = [], {}

    def _hub_tick(self, hub: HubMarun) -> None:
        """HubServer.tick: a `hubbeat` where it said nothing for a quarter interval; what came,
        to node 0 in one `groupbeats` line (without node 0's welcome: every link closed)."""
        if self.now - hub.said_at >= EVERY / RELAY_PARTS:
            self._to_group(hub, "hubbeat")
        if self.now < hub.next_forward:
            return
        hub.next_forward = max(hub.next_forward + EVERY / FORWARD_PARTS, self.now)
        entries, hub.entries = list(hub.entries.values()), {}
        if not entries:
            return
        if hub.pipe is None or not hub.member.welcomed:  # (Relay._hub_up)
            self._close_links(hub)
            return
        body = {"job": JOB, "node": hub.index, "slot": 0, "type": "groupbeats", "nodes": entries}
        self.to_leader.append((hub.pipe, encode(SECRET, body)))

    def _hub_reads(self, hub: HubMarun) -> bool:
        """HubServer.accept and .event: new links challenged; `hublink` (an older link of the
        same node closed), then `beats` entries kept, the last per slot; a closed link's lines
        read, then its end."""
        moved = False
        if hub.up_lost:
            hub.up_lost, moved = False, True
            self._close_links(hub)
        for link in list(hub.links):
            if link not in hub.links:
                continue  # (closed by a newer link of its node, just now)
            closed = link.closed_by is not None or link.child.code is not None
            if link.closed_by == "net" or (closed and not link.accepted):
                hub.links.remove(link)
                continue
            if not link.accepted:
                link.accepted, moved = True, True
                link.down.append("challenge")
            while link.up:
                line, moved = link.up.popleft(), True
                if line is None:
                    link.registered = True
                    for old in list(hub.links):
                        if old is not link and old.child.index == link.child.index:
                            old.closed_by = old.closed_by or "hub"
                            hub.links.remove(old)
                    continue
                assert link.registered, "beats before hublink"
                self._take(hub, link.child.index, line)
            if closed:
                hub.links.remove(link)
        return moved

    def _take(self, hub: HubMarun, node: int, beats: list[list[Any]]) -> None:
        """HubServer._take: a node's `beats` line into its entry of the next `groupbeats` line
        ([node, idles, cpus, steps], each a list of one item a slot; cpus and steps null where
        no slot has one: none here), each slot's last."""
        slots = self.job.job.coord.slots
        entry = hub.entries.setdefault(node, [node, [None] * slots, None, None])
        for slot, idle, _cpu, _steps in beats_of(beats, slots):
            entry[1][slot] = idle

    def _link_reads(self, node: HubMarun) -> bool:
        """HubLink.event: the challenge (then its `hublink`), node 0's `hb` (to the node's
        slots, as node 0's own), `hubbeat`; the link closed by the hub (or reset, or the hub
        gone): left. (Its connection to node 0 gone while it was frozen: its relay sees that
        first, and leaves the link: Relay._up_lost.)"""
        link = node.link
        if link is None:
            return False
        if node.pipe is not link.pipe:
            self._leave(node)
            return True
        moved = False
        while node.link is link and link.down:
            kind, moved = link.down.popleft(), True
            if kind == "challenge":
                link.ready = True
                link.up.append(None)
            elif kind == "hb":  # (Relay._node0_alive)
                HUB_SEEN["hb"] += 1
                self._member_does(node, node.member.heard(LeaderBeat(), self.now))
            link.last_in = self.now
        if node.link is link and (link.closed_by in ("hub", "net") or link.hub.code is not None):
            self._leave(node)
            moved = True
        return moved

    def _link_tick(self, node: HubMarun) -> None:
        """HubLink.tick: a link once its node is welcomed (on its connection to node 0), tried
        when due; left without a challenge in time, or with the hub silent for SILENT."""
        linked = node.pipe is not None and node.member.welcomed
        link = node.link
        if not linked:
            if link is not None:
                self._leave(node)
            return
        if link is None:
            if self.now >= node.next_try:
                hub = self.maruns[node.hub]  # type: ignore[index]
                assert isinstance(hub, HubMarun)
                if self.hub_refuses or hub.code is not None:
                    node.next_try = self.now + self.retry * EVERY  # (cannot connect)
                    return
                node.link = Link(node, hub, self.now)
                hub.links.append(node.link)
        elif not link.ready and self.now > link.deadline:
            self._leave(node)
        elif link.ready and self.now - link.last_in > SILENT:
            HUB_SEEN["silent"] += 1
            self._leave(node)

    def _leave(self, node: HubMarun) -> None:
        """HubLink.drop: back to beating node 0 directly; the hub tried again later."""
        link, node.link = node.link, None
        if link is not None:
            link.closed_by = link.closed_by or "child"
        node.next_try = self.now + self.retry * EVERY

    def _links_move(self) -> bool:
        moved = False
        for marun in self.maruns:
            if marun.code is not None or marun.frozen or not isinstance(marun, HubMarun):
                continue
            if marun.is_hub:
                moved = self._hub_reads(marun) or moved
            elif marun.link is not None:
                moved = self._link_reads(marun) or moved
        return moved

    def _advance(self, seconds: float) -> None:
        if self.leader_frozen:
            self.node_0_froze = True
        super()._advance(seconds)

    # -- the steps ------------------------------------------------------------------------------

    @rule()
    def a_hub_link_breaks(self) -> None:
        """A reset: both ends find the link gone (each when its relay runs next)."""
        for marun in self.maruns:
            if isinstance(marun, HubMarun) and marun.link is not None:
                marun.link.closed_by = "net"
                marun.link = None
                marun.next_try = self.now + self.retry * EVERY

    @rule(seconds=st.sampled_from([1.0, 2.5]))
    def the_hub_is_frozen_briefly(self, seconds: float) -> None:
        """The hub's marun stopped (SIGSTOP) then continued, within SILENT: its group's beats
        wait in its sockets, node 0's liveness is not handed on; its group stays linked."""
        self._hub_frozen(seconds)

    @rule(seconds=st.sampled_from([SILENT + 0.5, PEER_TIMEOUT + 2.0]))
    def the_hub_is_frozen_past_its_silence(self, seconds: float) -> None:
        """The same, longer: past SILENT its group leaves it and beats node 0 directly; past
        peer_timeout node 0 finds it lost."""
        self._hub_frozen(seconds)

    def _hub_frozen(self, seconds: float) -> None:
        """As `freeze` and `resume` of the hub, with time between (a rule of its own, so that
        the hub's freezes are not rarer than its troubles are worth). Thawed, it reads what
        waited in its sockets and hands it on, stale, at once."""
        hub = self.maruns[GROUP]
        if hub.code is not None or hub.frozen:
            return
        hub.frozen = True
        self.troubled.add(hub.index)
        self._advance(seconds)
        hub.frozen = False
        self._turn(hub)
        self._settle()

    @rule(refuses=st.booleans())
    def the_hubs_port_refuses(self, refuses: bool) -> None:
        """The hub's port refuses connections (a firewall, or its port taken): links tried
        fail (those made stay)."""
        self.hub_refuses = refuses

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def a_hub_costs_its_group_nothing(self) -> None:
        """docs/supervision.md, "Liveness through hubs": neither a frozen nor a killed hub makes
        any other node lost; none gives up on node 0 for it."""
        if not hasattr(self, "job"):
            return
        for marun in self.maruns:
            if marun.frozen:
                self.troubled.add(marun.index)
        self.troubled |= {m.index for m in self.gone}
        if self.node_0_froze:
            return
        assert self.lost <= self.troubled, f"nodes {self.lost - self.troubled} lost for a hub"
        for marun in self.maruns:
            if marun.member.gave_up:
                assert marun.index in self.troubled, (marun.index, marun.member.stop_event)


HUB_SEEN: Counter[str] = Counter()  # what the hubs' steps did over a run (none vacuous)


def run_whole_job(examples: int, steps: int) -> None:
    run_interleavings(examples, steps, WholeJob)


def run_whole_job_with_spares(examples: int, steps: int) -> None:
    run_interleavings(examples, steps, WholeJobWithSpares)


def test_the_whole_job_in_every_interleaving() -> None:
    run_whole_job(int(os.environ.get("MARUN_PROPERTY_EXAMPLES", "200")), steps=30)


def test_the_whole_job_with_a_spare_in_every_interleaving() -> None:
    run_whole_job_with_spares(int(os.environ.get("MARUN_PROPERTY_EXAMPLES", "200")), steps=30)


def run_whole_job_with_hubs(examples: int, steps: int) -> None:
    HUB_SEEN.clear()
    run_interleavings(examples, steps, WholeJobWithHubs)
    # (the hub carried heartbeats both ways, and its group beat node 0 directly, in some
    # interleavings; a group leaving a silent hub: test_the_model_of_the_hubs_step_by_step)
    for seen in ("groupbeats", "hb", "direct"):
        assert HUB_SEEN[seen], (seen, HUB_SEEN)


def test_the_whole_job_with_liveness_hubs_in_every_interleaving() -> None:
    # (150, not 200: a step of its model costs more; the fast lane keeps it near 4 s)
    run_whole_job_with_hubs(int(os.environ.get("MARUN_PROPERTY_EXAMPLES", "150")), steps=30)


def _checked(job: WholeJobWithHubs) -> WholeJobWithHubs:
    for invariant_ in (
        job.rounds_within_the_budget,
        job.node_0_is_never_lost_to_itself,
        job.no_round_after_a_stop_signal,
        job.a_hub_costs_its_group_nothing,
    ):
        invariant_()
    return job


def test_the_model_of_the_hubs_step_by_step() -> None:
    """The model's hub does what its docstring says (the interleavings above are not empty
    words): node 3's heartbeats through its hub and node 0's back through it, none of node 0's
    own to it meanwhile; the hub frozen past SILENT: node 3 leaves it and beats node 0
    directly, node 0 it; linked again once the hub runs; the hub killed: node 3 beats node 0
    directly at once, links to the new hub, and is never lost."""
    job = WholeJobWithHubs()
    job.make_job(budget=1, retry=1.0, linked=True)
    hub, node = job.maruns[GROUP], job.maruns[GROUP + 1]
    assert isinstance(hub, HubMarun) and isinstance(node, HubMarun) and hub.is_hub
    assert node.hub == GROUP and node.link is not None and node.link.ready
    seen = Counter(HUB_SEEN)
    _checked(job).time_passes(3.0)
    assert node.pipe is not None and hub.pipe is not None and node.pipe.via_hub is hub.pipe
    assert HUB_SEEN["groupbeats"] > seen["groupbeats"] and HUB_SEEN["hb"] > seen["hb"]
    assert HUB_SEEN["direct"] == seen["direct"]  # (none of node 3's to node 0 itself)
    assert job.now - node.pipe.last_out > EVERY  # (nor node 0's to it)

    seen = Counter(HUB_SEEN)
    _checked(job).the_hub_is_frozen_past_its_silence(SILENT + 0.5)
    assert HUB_SEEN["silent"] == seen["silent"] + 1 and node.link is None
    assert HUB_SEEN["direct"] > seen["direct"] and job.now - node.pipe.last_out <= EVERY
    assert not any(m.lost_why for m in job.job.job.members.values())
    _checked(job).time_passes(3.0)
    assert node.link is not None and node.link.ready and node.link.hub is hub

    job.its_marun_is_killed_and_started_again(GROUP)
    assert node.link is None  # (its link closed with the hub: left at once)
    seen = Counter(HUB_SEEN)
    _checked(job).time_passes(0.5)
    assert HUB_SEEN["direct"] == seen["direct"] + 1
    _checked(job).time_passes(3.0)
    assert node.link is not None and node.link.ready and node.link.hub is job.maruns[GROUP]
    assert len(job.job.job.rounds) == 1  # (the hub's loss: a round, with budget 1)
    assert not job.job.job.members[(GROUP + 1, 0)].lost_why
    _checked(job).teardown()
