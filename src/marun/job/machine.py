"""Node 0's job, as a machine: fed events (a member's hello or message, a connection closed, a
tick, node 0's own stall) with the time passed in, it changes the job's state
(marun.job.job_state) and returns what the shell must do (marun.job.actions). No sockets,
threads, clocks or processes: marun.job.coordinator carries the bytes, the tests drive it with a
fake network and clock (tests/unit/test_job_machine_scenarios.py, test_job_interleavings.py).
Its phases and their allowed moves: marun.job.phases.JOB_MOVES. Arrival and lost nodes:
marun.job.admission; restart rounds: marun.job.round_barrier.
"""

from __future__ import annotations

from typing import Any, Optional

from marun.exit_codes import LOST_EXIT
from marun.job import admission, preflight_barrier, round_barrier, spares
from marun.job.actions import Action, Announce, Handle, Key, NodeBeats, Refuse, WriteReport
from marun.job.hang_watch import watch_hang
from marun.job.job_state import JobState
from marun.job.messages import (
    Beat,
    Done,
    End,
    FailureSaid,
    Hello,
    LinkSaid,
    MemberMessage,
    PreflightSaid,
    Running,
    Stacks,
    Stopped,
)
from marun.job.phases import JobPhase
from marun.job.roster import MemberState
from marun.plan.coordination import HEARTBEAT, Coordination
from marun.runtime.failure import Failure
from marun.runtime.round_rule import RoundRule

# A gap this long between two looks of node 0's loop (it looks every 0.2 s at least): node 0's
# marun did not run meanwhile (SIGSTOP, or starved), and the members' silence in it is node 0's.
LOOK = 1.5  # (below 3 s - 1 s: node 0's own slot, which beats every second, is never lost to it)
STALL = 3 * HEARTBEAT  # a gap this long is an error (a shorter one: info, in the log file alone)
# The others give up on node 0 after peer_timeout without a line of it: once the longest of them
# went within this of it, node 0's next line may come too late (its heartbeat goes out in the turn
# that finds the gap, and reaches a member in milliseconds: a quarter second leaves room for a
# loaded host, and a stall that small is rarely stopped for nothing).
GIVE_UP_MARGIN = 0.25
# After the start, a member whose connection closed without its `end` is lost this long after,
# unless its marun reconnects meanwhile (a member reconnects at once after a drop).
CLOSED_LOST = 1.5  # (a member dropped after its welcome tries again at once, then every 0.5 s)
LATE_WAIT = 3.0  # after a stop, how long a node not (or no longer) present is waited for

# One entry of a relay's `beats` line as the machine takes it: the lane it came on, the member it
# speaks for, and that member's heartbeat (idle >= 0, cpu, progress: a NodeReport or None).
EntryBeat = tuple[Handle, Key, float, Optional[float], Any]
SaidHello = tuple[Handle, str, Hello]  # a hello: the handle it came on, that one's address


class JobMachine:
    def __init__(
        self,
        coord: Coordination,
        instance: str,
        *,
        rule: RoundRule | None = None,
        ports: dict[str, str] | None = None,
        now: float,
        wall: float,
        preflight: str = "off",
        fail_fast: bool = True,
    ) -> None:
        self.job = JobState(
            coord, instance, rule, dict(ports or {}), now, wall, preflight, fail_fast
        )

    def _clock(self, now: float, wall: float) -> None:
        self.job.now, self.job.wall = now - self.job.not_run, wall

    def _taken(self) -> list[Action]:
        actions, self.job.actions = self.job.actions, []
        return actions

    # -- events -----------------------------------------------------------------------------

    def hello(
        self, handle: Handle, address: str, msg: Hello, now: float, wall: float
    ) -> list[Action]:
        return self.hellos([(handle, address, msg)], now, wall)

    def hellos(self, said: list[SaidHello], now: float, wall: float) -> list[Action]:
        """Hellos taken at one time (a relay's `hellos` line's), each as its slot's own hello."""
        self._clock(now, wall)
        for handle, address, msg in said:
            admission.hello(self.job, handle, address, msg)
        return self._taken()

    def message(
        self,
        handle: Handle,
        key: Key,
        kind: str,
        msg: MemberMessage | None,
        now: float,
        wall: float,
    ) -> list[Action]:
        """A line of type `kind` from a connection that said hello as `key` (any other is
        refused); `msg` None: a type no member sends (it only shows the member alive)."""
        self._clock(now, wall)
        job = self.job
        member = self._heard_from(handle, key)
        if member is None:
            return [Refuse(handle, f"{kind} before hello")]
        if isinstance(msg, Beat):
            self._beat(key, member, msg.idle, msg.cpu, msg.progress)
        elif isinstance(msg, FailureSaid):
            self._failure(msg.failure, msg.round, msg.uptime, member)
        elif isinstance(msg, Stopped):
            member.stopped_round = max(member.stopped_round, msg.round)
            round_barrier.check_round(job)
        elif isinstance(msg, Running):
            round_barrier.on_running(job, member, msg.round, msg.ranks)
        elif isinstance(msg, Stacks):
            member.stacks = msg.text
        elif isinstance(msg, End) and member.ended is None:  # (said again after a reconnection)
            self._end(key, msg)
        elif isinstance(msg, (PreflightSaid, LinkSaid)):
            self._preflight(key, msg)
        return self._taken()

    def beats(self, beats: list[EntryBeat], now: float, wall: float) -> list[Action]:
        """A relay's heartbeats of its node's slots (one `beats` line), each taken as message()
        takes an `hb` (_beat), in one call (1,638 a second at 4,096 x 8: no object per entry)."""
        self._clock(now, wall)
        lookup, heard_from, beat = self.job.members.lookup, self._heard_from, self._beat
        for handle, key, idle, cpu, progress in beats:
            member = heard_from(handle, key, lookup(key))
            if member is None:
                self.job.actions.append(Refuse(handle, "hb before hello"))
            else:
                beat(key, member, idle, cpu, progress)
        return self._taken()

    def group_beats(
        self, beats: list[NodeBeats], now: float, wall: float
    ) -> tuple[list[Action], list[Handle]]:
        """A hub's heartbeats of its group's nodes (marun.plan.hubs), each slot's taken as its
        node's `beats` entry, on the lane the member holds; one it holds none of (closed, not
        welcomed yet) is passed over, and so is one found lost: a hub's word may be old (the hub
        was frozen with the node's beats in its sockets, and hands them on when it thaws), so
        only the node's own line counts it back. Also a lane heard of each node spoken for: those
        nodes hear node 0 through the hub. (13,107 slots a second at 4,096 x 8: _heard_from and
        Roster.seen written out, a node's members found once.)"""
        self._clock(now, wall)
        job = self.job
        heard: list[Handle] = []
        members, bound, beat, now, wall = job.members, job.bound.get, self._beat, job.now, job.wall
        row_of, node_heard = members.row_of, members.node_heard
        for node, idles, cpus, progress in beats:
            row, lane = row_of(node) or {}, None
            for slot, idle in enumerate(idles):
                held = row.get(slot)
                if idle is None or held is None or held.outcome == "lost":
                    continue
                handle = held.conn
                if handle is None or bound(handle) != (node, slot):
                    continue
                held.last_seen, held.last_seen_wall, held.idle, lane = now, wall, idle, handle
                if cpus is not None or progress is not None:
                    said = None if progress is None else progress[slot]
                    beat((node, slot), held, idle, None if cpus is None else cpus[slot], said)
            if lane is not None:
                heard.append(lane)
                node_heard(node, now)
        return self._taken(), heard

    def _heard_from(
        self, handle: Handle, key: Key, member: MemberState | None = None
    ) -> MemberState | None:
        """The member a line on `handle` speaks for (None: it did not say hello as `key`), heard
        now: alive, and counted again if it had been found lost. `member`: the one at `key`,
        where the caller looked it up already."""
        job = self.job
        if member is None:
            member = job.members.get(key)
        if member is None or job.bound.get(handle) != key:
            return None
        job.members.seen(key, member, job.now, job.wall)
        if member.outcome == "lost" and member.conn == handle:
            admission.back(job, member)
        return member

    def _beat(
        self, key: Key, member: MemberState, idle: float, cpu: float | None, progress: Any
    ) -> None:
        member.idle = idle
        if cpu is not None:
            member.cpu_history.append((self.job.now, cpu))
        if progress is not None:
            self._progress_of(key, progress)

    def closed(self, handle: Handle, now: float) -> None:
        """A connection closed (the peer's doing or the shell's): its member is silent from now
        on (peer_timeout counts; after the start, CLOSED_LOST; before it, not present)."""
        self._clock(now, self.job.wall)
        key = self.job.bound.pop(handle, None)
        if key is None:
            return
        member = self.job.members.get(key)
        if member is not None and member.conn == handle:
            member.conn = None
            member.closed_at = self.job.now
            self.job.members.closed.add(key)
            self.job.members.unlinked.add(key)

    def tick(self, now: float, wall: float, *, frozen: bool = False) -> list[Action]:
        """Time passed: arrival_timeout, lost nodes, the round's barrier, hangs, the end.
        `frozen`: the shell did not run just before this tick (node 0's own silence; nobody is
        lost for it)."""
        self._clock(now, wall)
        job = self.job
        if job.phase is JobPhase.GATHERING:
            admission.forget_departed(job)
            if job.now - job.t0 >= job.coord.arrival_timeout:
                if job.preflight != "off" and admission.all_present(job):
                    admission.open_barrier(job, timed_out=True)  # a preflight still out
                else:
                    admission.arrival_failed(job)
            return self._taken()
        if not frozen:
            self._find_lost()
        if job.phase is JobPhase.RESTARTING:
            round_barrier.check_round(job)
            return self._taken()
        watch_hang(self.job)
        self._say_progress()
        self._check_done()
        return self._taken()

    def stalled(self, gap: float, unheard: float, now: float, wall: float) -> list[Action]:
        """Node 0's marun did not run for `gap` seconds (frozen by SIGSTOP, or starved); the
        longest any member then went without a line of node 0's: `unheard`. The gap is node 0's
        own silence: the job's clock leaves it out (job.not_run). Once `unheard` came within
        GIVE_UP_MARGIN of peer_timeout, the other nodes gave up on node 0 (or will before its
        next line reaches them), so node 0 is the job's failure, before the start too (a member
        welcomed waits for it no longer); those that left ended when they gave up, not when node
        0 noticed, and one still there says its own end later."""
        job, coord = self.job, self.job.coord
        if gap < LOOK:
            self._clock(now, wall)
            return self._taken()
        job.not_run += gap
        self._clock(now, wall)
        job.log("coordinator_stalled", "error" if gap >= STALL else "info", seconds=round(gap, 1))
        if unheard + GIVE_UP_MARGIN < coord.peer_timeout:
            return self._taken()
        why = (
            f"node {coord.leader}'s marun did not run for {gap:.1f}s (stopped, e.g. SIGSTOP, or "
            f"starved): the other nodes went {unheard:.1f}s without a word of it, past "
            f"peer_timeout {coord.peer_timeout:g}s or too near it, and gave up on it"
        )
        failure = Failure(node=coord.leader, host=coord.host, exit_code=LOST_EXIT, why=why)
        job.stop(LOST_EXIT, failure)
        if unheard >= coord.peer_timeout:  # they have given up; nearer, they hear the stop
            gave_up = wall - unheard + coord.peer_timeout
            for member in job.members.values():
                if member.ended is None and member.node != coord.leader:
                    member.ended, member.outcome = gave_up, "lost"
                    member.gave_up_at = gave_up  # (its lines that waited revive it: said before)
        return self._taken()

    # -- the job's logic ----------------------------------------------------------------------

    def _preflight(self, key: Key, msg: PreflightSaid | LinkSaid) -> None:
        """A node's preflight report or link; the start, once it was all the barrier waited
        for."""
        job = self.job
        if isinstance(msg, PreflightSaid):
            preflight_barrier.on_report(job, key, msg.report)
        else:
            preflight_barrier.on_link(job, key, msg.link)
        gathering = job.phase is JobPhase.GATHERING
        if gathering and job.preflight != "off" and admission.all_present(job):
            admission.open_barrier(job)

    def _end(self, key: Key, msg: End) -> None:
        job = self.job
        m = job.members[key]
        m.ended, m.outcome, m.exit_code = job.wall, msg.outcome, msg.exit_code
        placeless = m.place is None or m.leaving  # (leaving: its place is being given away)
        if placeless and spares.on(job) and job.phase is not JobPhase.GATHERING:
            spares.left(job, m)  # a spare, or a node whose place went to one: not waited for
            return
        if job.phase is JobPhase.GATHERING:
            # It ended before the job started (its marun was stopped while waiting): the job
            # cannot start without it.
            code = m.exit_code or LOST_EXIT
            why = (
                f"node {key[0]} ({m.host}) left before the start ({m.outcome}, exit code "
                f"{m.exit_code})"
            )
            job.stop(code, Failure(node=key[0], host=m.host, exit_code=code, why=why))

    def _failure(
        self, failure: Failure, round_: int | None, uptime: float | None, member: MemberState
    ) -> None:
        job = self.job
        if failure.stop_signal and member.place is None and job.start_sent and spares.on(job):
            # A spare (it holds no place) told to stop: it leaves; the job goes on.
            job.log("spare_stopped", "warning", node=member.node, signal=failure.stop_signal)
            return
        if failure.stop_signal and spares.leaving(job, member):
            self._leaves(member, failure)
            return
        if failure.stop_signal:
            # A node's marun was told to stop (its pod deleted, a user's ^C): the job ends with
            # 128+N in every phase, a round's barrier included; it never starts a round, and no
            # round waits for the signalled node (docs/supervision.md, "Signals").
            if len(job.members) == job.expected and all(
                m.daemons_only for m in job.members.values()
            ):
                # A job of daemons alone (a lone TF parameter server, or sshd) has no end of its
                # own: a stop signal is how it ends, with 0.
                job.stop_daemons()
                job.exit_code = 0
                return
            job.stop(failure.code, failure)
            return
        if job.stopped is not None or job.phase is JobPhase.RESTARTING:
            return  # a round under way: its ranks' ends are no failures of the next
        if round_ is not None and round_ != job.round:
            return  # said in a round that is over
        unrestarted = round_barrier.restart(job, failure.code, failure, uptime)
        if unrestarted is None:
            return
        if job.fail_fast:
            job.stop(failure.code, unrestarted)
        elif job.first_failure is None:
            job.first_failure, job.exit_code = unrestarted, failure.code

    def _leaves(self, member: MemberState, failure: Failure) -> None:
        """With spares, a node other than node 0 told to stop after the start (its pod deleted,
        as the platform does to replace a broken machine) leaves its place as a lost node does:
        the next round gives it to a spare, or waits for the pod's replacement. Without a round
        left, the signal stops the job as it would without spares."""
        job = self.job
        member.leaving = True
        job.log("node_leaving", "warning", node=member.node, signal=failure.stop_signal)
        if job.phase is JobPhase.RESTARTING:
            return  # the round under way gives its place away (spares.substitute)
        lost = Failure(
            node=member.node,
            host=member.host,
            exit_code=LOST_EXIT,
            why=f"node {member.node} ({member.host}) lost: its marun was stopped by "
            f"{failure.stop_signal} (its pod deleted)",
        )
        unrestarted = round_barrier.restart(job, LOST_EXIT, lost, None)
        if unrestarted is not None:
            job.stop(failure.code, failure.but(no_restart=unrestarted.no_restart))

    def _find_lost(self) -> None:
        """The members silent for peer_timeout, and those whose connection closed CLOSED_LOST
        ago, are lost; found among the nodes due a look and the unlinked alone (marun.job.roster),
        and judged in the roster's order, as a walk of every member would."""
        job = self.job
        members, now = job.members, job.now
        candidates = set(members.silent(now, job.coord.peer_timeout))
        for key in list(members.unlinked):
            member = members.get(key)
            if member is None or member.conn is not None or member.ended is not None:
                members.unlinked.discard(key)
            elif now - member.closed_at > CLOSED_LOST:
                candidates.add(key)
        if len(candidates) > 1:
            order = [key for key in members if key in candidates]
        else:
            order = list(candidates)
        for key in order:
            member = members.get(key)
            if member is None or member.ended is not None:
                continue
            if now - member.last_seen > job.coord.peer_timeout:
                admission.lost(job, member)
            elif member.conn is None and now - member.closed_at > CLOSED_LOST:
                # Its marun's connection closed without a goodbye (`end`) and no marun of its
                # came back on a new one: its pod was deleted or its machine is gone.
                admission.lost(
                    job,
                    member,
                    f"its marun's connection closed without a goodbye and it did not reconnect "
                    f"within {CLOSED_LOST:g}s (its pod deleted, or its machine gone)",
                )

    def _progress_of(self, key: Key, report: object) -> None:
        job = self.job
        if job.progress is None:
            from marun.progress.aggregate import Aggregator

            job.progress = Aggregator(job.coord.progress_timeout)
        job.progress.add(key[0], report, job.now, slot=key[1])

    def _say_progress(self) -> None:
        """The job's status line on node 0's console: at most every 10 s while the steps move,
        at once on news (marun.progress.aggregate)."""
        job = self.job
        if job.progress is None or job.phase is not JobPhase.RUNNING:
            return
        line = job.progress.status(job.now)
        if line is not None:
            job.actions.append(Announce(f"marun: {line}"))

    def _check_done(self) -> None:
        job = self.job
        if job.phase is JobPhase.DONE:
            return
        if len(job.members) < job.expected and (
            job.stopped is None or job.now - job.stopped_at < LATE_WAIT
        ):
            # Once stopped, a node that never arrived (or did not come back to a node 0 that
            # was restarted) is waited for LATE_WAIT only: its marun retries every 0.5 s, and
            # hears the stop instead of giving up on node 0 after peer_timeout.
            return
        # (each test below stops at the first member that answers it: a tick of a running
        # job of 32,768 members looks at one or two, not at all of them twice)
        pending = (m for m in job.members.values() if m.ended is None)
        first = next(pending, None)
        if first is not None and spares.on(job) and first.place is None:
            if all(m.place is None for m in pending):
                spares.release(job)  # every place's node has ended: the spares hear the end
                return
            pending = (m for m in job.members.values() if m.ended is None)
            first = next(pending)
        if first is not None and job.stopped is None:
            if (
                (first.daemons_only or first.place is None)
                and all(m.daemons_only or m.place is None for m in pending)
                # (a job of daemons alone has no worker whose end ends them)
                and any(not m.daemons_only for m in spares.holders(job))
            ):
                # TF parameter servers, an MPI node's sshd end when the job is done (and the
                # spares that wait with them hear the end)
                job.stop_daemons()
            return
        if first is not None:
            return
        job.enter(JobPhase.DONE)
        if job.exit_code is None:
            # (the nodes that hold a place: a spare's own end is not the job's)
            job.exit_code = next((m.exit_code for m in spares.holders(job) if m.exit_code), 0)
        job.actions.append(WriteReport())  # before `done`: a node that ends on it finds job.json
        job.broadcast(Done(job.exit_code))
