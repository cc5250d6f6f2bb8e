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

MARUN_PROPERTY_EXAMPLES sets the example count (the fast lane's default; the slow lane runs
thousands: tests/cli/test_job_interleavings_many.py).
"""

from __future__ import annotations

import os
import signal
from collections import deque
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
from marun.job.actions import Action, Broadcast, Drop, Refuse, Send, TurnAway
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
from marun.job.report import state_report
from marun.plan.coordination import Coordination
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


def _coord(index: int, nodes: int = NODES, spares: int = 0) -> Coordination:
    return Coordination(
        host="127.0.0.1",
        port=0,
        nodes=nodes,
        index=index,
        job=JOB,
        spares=spares,
        arrival_timeout=ARRIVAL_TIMEOUT,
        peer_timeout=PEER_TIMEOUT,
    )


class Pipe:
    """One connection between a node's marun and node 0's."""

    def __init__(self, marun: Marun) -> None:
        self.marun = marun
        self.open = True


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
            self.job.closed(pipe, self.now)
            return
        if not pipe.open:
            return
        try:
            body = decode(SECRET, JOB, line)
        except ProtocolError:
            self._close(pipe)
            return
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
            self.job.closed(pipe, self.now)
        if pipe.marun.pipe is pipe:
            pipe.marun.pipe = None

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
        if marun.pipe is not None:
            self._say(marun, Beat(0.0, None, None))
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
            self._member_does(marun, marun.member.heard(leader_message(body), self.now))

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
            if not moved:
                return

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
            # node 0's heartbeats are its shell's (marun.job.wire's schedule): one each turn
            self._leader_does([Broadcast(LeaderBeat())])
            self.last_beat = self.now
            self._settle()

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
        # (the shell's: the oldest last line out to a member whose hello node 0 took; none, 0)
        bound = any(isinstance(m.conn, Pipe) for m in self.job.job.members.values())
        unheard = self.now - self.last_beat if bound else 0.0
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


def run_whole_job(examples: int, steps: int) -> None:
    run_interleavings(examples, steps, WholeJob)


def run_whole_job_with_spares(examples: int, steps: int) -> None:
    run_interleavings(examples, steps, WholeJobWithSpares)


def test_the_whole_job_in_every_interleaving() -> None:
    run_whole_job(int(os.environ.get("MARUN_PROPERTY_EXAMPLES", "200")), steps=30)


def test_the_whole_job_with_a_spare_in_every_interleaving() -> None:
    run_whole_job_with_spares(int(os.environ.get("MARUN_PROPERTY_EXAMPLES", "200")), steps=30)
