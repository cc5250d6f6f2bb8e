"""Node 0's side, the shell: a thread in the leader's marun that every node's marun (its own
included) reports to. It carries bytes and time and nothing else: the job port's connections
(marun.job.wire: framing, signing, limits) feed each member's line, typed
(marun.job.messages), to the job machine (marun.job.machine), which decides; the thread carries
out what the machine returns (marun.job.actions), ticks it, and tells it when node 0's own marun
did not run for a while.

Messages in (member -> coordinator): hello {nonce, instance, leader, started, version}, hb
{idle, cpu}, failure {failure, round, uptime}, stopped {round}, running {round, ranks}, stacks
{text}, end {outcome, exit_code}. Out: challenge {nonce, instance, version} (first, on every
connection), welcome {instance}, start {round, ports}, restart {round, cause}, hb, dump, stop
{code, failure}, done {code}, refused {why} (then the connection is closed). Replay
protection: marun.job.protocol.

Nothing that arrives on the port may end this thread: every line goes through protocol.decode
(which refuses whatever is not a well-typed message of this job), and the loop catches anything
unexpected, logs it with its traceback and goes on (marun.job.limits bounds what the network
may cost it).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from marun.job import collector
from marun.job.actions import (
    Action,
    Announce,
    Bind,
    Broadcast,
    Drop,
    Log,
    NodeBeats,
    Refuse,
    Send,
    TurnAway,
    WriteReport,
)
from marun.job.beat_schedule import TICK
from marun.job.conns import Conn, Lane
from marun.job.job_state import RoundRecord
from marun.job.machine import LOOK, EntryBeat, JobMachine, SaidHello
from marun.job.messages import Hello, StopJob, member_message, progress_of
from marun.job.phases import JobPhase
from marun.job.protocol import new_nonce
from marun.job.relay_side import SlotBeat
from marun.job.roster import Roster
from marun.job.wire import JobPort
from marun.plan.coordination import Coordination
from marun.runtime.failure import Failure
from marun.runtime.round_rule import RoundRule

TICK_WALKS = 16384  # members the tick may walk a second (the hang watchdog's and a round's
# barrier's walk every member; lost nodes and the end look at the silent and the pending alone)
TICK_MOST = 2.0  # seconds between two ticks at most (lost nodes are found within a tick)
# In a large job's steady state (docs/performance.md, "third round: node 0's turns"): a turn at
# most this often, so that each reads the lines of many nodes, not one. A line waits at most
# this long more; a job of at most PACED_FROM marun processes is never paced.
PACE = 0.02
PACED_FROM = 256


class Coordinator:
    def __init__(
        self,
        coord: Coordination,
        secret: bytes,
        *,
        announce: Callable[[str], None] | None = None,
        log: Callable[..., None] | None = None,
        rule: RoundRule | None = None,
        ports: dict[str, str] | None = None,
        report_dir: str | None = None,
        preflight: str = "off",
    ) -> None:
        self.coord = coord
        # job.json's directory: node 0 writes it itself, as the job ends (or at close)
        self._report_dir = report_dir
        self.report_path: str | None = None
        self._announce = announce or console_line
        self._log = log or (lambda event, level="info", **kw: None)
        self._lock = threading.Lock()
        self.instance = new_nonce()  # this coordinator's: a restarted node 0 has another
        self.errors = 0  # unexpected exceptions caught by the loop (logged each)
        self.machine = JobMachine(
            coord,
            self.instance,
            rule=rule,
            ports=ports,
            now=time.monotonic(),
            wall=time.time(),
            preflight=preflight,  # the preflight at the start barrier (marun.job.preflight_barrier)
        )
        self.port = JobPort(
            coord,
            secret,
            self.instance,
            self.machine.job.hb_every,
            log=self._log,
            on_line=self._line,
            on_closed=self._closed,
            on_beats=self._beats,
            on_hellos=self._hellos,
            on_group_beats=self._group_beats,
        )
        # The tick may walk every member (the hang watchdog, a round's barrier; lost nodes and
        # the end look at the silent and the pending alone): after every batch of lines in a
        # small job, in a larger one as often as TICK_WALKS member visits a second allow: every
        # 0.5 s at 8,192 marun processes, every 2 s at 32,768 (12 ms a walk here). The port's
        # part (hello time-outs, slow readers, node 0's heartbeats due) runs every TICK.
        self._tick_every = min(TICK_MOST, self.expected / TICK_WALKS)
        self._last_tick = self._last_port_tick = 0.0
        self._last_run = time.monotonic()
        # Not a phase of the job: another thread's request that this one finish (after DONE).
        self._close_requested = threading.Event()
        self._linger = 2.0
        self._paced = self.expected > PACED_FROM
        # A large job's arrival: Python's collector less often meanwhile (marun.job.collector)
        self._arriving = False
        self._thread = threading.Thread(target=self._loop, name="marun-coordinator", daemon=True)

    # -- what the machine knows, read by link.py, job.json and the tests ----------------------

    @property
    def members(self) -> Roster:
        return self.machine.job.members

    @property
    def phase(self) -> JobPhase:
        return self.machine.job.phase

    @property
    def stopped(self) -> StopJob | None:
        return self.machine.job.stopped

    @property
    def first_failure(self) -> Failure | None:
        return self.machine.job.first_failure

    @property
    def exit_code(self) -> int | None:
        return self.machine.job.exit_code

    @property
    def rounds(self) -> list[RoundRecord]:
        return self.machine.job.rounds

    @property
    def started_at(self) -> float:
        return self.machine.job.started_at

    @property
    def start_sent(self) -> bool:
        return self.machine.job.start_sent

    @property
    def done_sent(self) -> bool:
        return self.phase is JobPhase.DONE

    @property
    def expected(self) -> int:
        return self.coord.nodes * self.coord.slots

    @property
    def hb_every(self) -> float:
        return self.machine.job.hb_every

    @property
    def refused(self) -> int:
        return self.port.refusals.total

    # -- the thread -------------------------------------------------------------------------

    def start(self) -> Coordinator:
        self._thread.start()
        return self

    def close(self, linger: float = 2.0) -> None:
        """After `done`: let members read it (the loop goes on up to `linger` seconds while a
        member is connected), then stop; job.json is written now if the job never got to DONE
        (node 0's own marun gave up first)."""
        self._linger = linger
        self._close_requested.set()
        self._thread.join(linger + 1.0)
        with self._lock:
            self._write_own_report()

    def _loop(self) -> None:
        closing_since: float | None = None
        if self._paced and self.phase is JobPhase.GATHERING:
            self._arriving = True
            collector.arrival_begins()
        try:
            while True:
                events = self.port.sel.select(TICK)
                turn = time.monotonic()
                self._check_stall()  # before reading what piled up meanwhile
                for key, mask in events:
                    conn = key.data
                    try:
                        if conn is None:
                            with self.port.reserve.lock:
                                self.port.accept()
                        else:
                            self.port.ready(conn, mask)
                    except Exception as exc:  # nothing from the port ends the job
                        self._unexpected(exc, conn)
                try:
                    if self._tick_due():  # in a large job not after every batch
                        with self._lock:
                            self._tick()
                    elif time.monotonic() - self._last_port_tick >= TICK:
                        self._last_port_tick = time.monotonic()
                        self.port.tick(self._last_port_tick)
                except Exception as exc:
                    self._unexpected(exc, None)
                if self._close_requested.is_set():
                    closing_since = closing_since or time.monotonic()
                    live = [c for c in self.port.conns if c.member is not None]
                    if not live or time.monotonic() - closing_since > self._linger:
                        break
                elif events:
                    self._pace(turn)
                if self._arriving and self.phase is not JobPhase.GATHERING:
                    self._arrived()
        finally:
            self._arrived()
            self.port.close()

    def _arrived(self) -> None:
        if self._arriving:
            self._arriving = False
            collector.arrival_ends()

    def _pace(self, turn: float) -> None:
        """A large job's steady state (RUNNING: every member started, no round under way): the
        next turn PACE after this one began. A turn costs node 0 more than its lines (the wake-up,
        the select, cold caches): one a line, 205 a second at 4,096 nodes, was most of node 0's
        steady CPU. Arrival, rounds and the stop are never paced; a close is not kept waiting."""
        if not self._paced or self.machine.job.phase is not JobPhase.RUNNING:
            return
        left = PACE - (time.monotonic() - turn)
        if left > 0:
            self._close_requested.wait(left)

    def _tick_due(self) -> bool:
        """The tick (timeouts, heartbeats, done) runs at most every `_tick_every`: at 8,192
        members a batch of lines comes every few milliseconds, and the tick walks them all."""
        now = time.monotonic()
        if now - self._last_tick < self._tick_every:
            return False
        self._last_tick = now
        return True

    def _tick(self) -> None:
        now = self._last_port_tick = time.monotonic()
        self.port.tick(now)  # hello time-outs, slow readers, heartbeats due (wire.py)
        # Frozen since the loop's last look (SIGSTOP between it and here): the nodes' silence is
        # node 0's own, which the next look (_check_stall) judges; none of them is lost for it.
        frozen = now - self._last_run >= LOOK
        self._apply(self.machine.tick(now, time.time(), frozen=frozen))

    def _check_stall(self) -> None:
        """This thread did not run for a while (node 0's marun frozen by SIGSTOP, or starved):
        the machine judges what that means."""
        now = time.monotonic()
        last, self._last_run = self._last_run, now
        if now - last >= LOOK:
            unheard = self.port.unheard(now)
            with self._lock:
                self._apply(self.machine.stalled(now - last, unheard, now, time.time()))

    def _unexpected(self, exc: Exception, conn: Conn | None) -> None:
        """A bug, or something no test thought of: logged whole; the connection it came on is
        dropped; the job goes on."""
        self.errors += 1
        self._log(
            "job_coordinator_error",
            "error",
            source=conn.address if conn is not None else None,
            error=f"{type(exc).__name__}: {exc}"[:300],
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[
                -4000:
            ],
        )
        if conn is not None:
            with contextlib.suppress(Exception):
                self.port.drop(conn)

    # -- between the port and the machine -------------------------------------------------

    def _line(self, lane: Lane, body: dict[str, Any]) -> None:
        try:
            msg = member_message(body)
        except ValueError as exc:  # a preflight report or link that is not one
            self.port.refuse(lane.conn, f"{body['type']}: {exc}"[:300])
            self.port.drop(lane.conn)
            return
        now, wall = time.monotonic(), time.time()
        with self._lock:
            if isinstance(msg, Hello):
                actions = self.machine.hello(lane, lane.address, msg, now, wall)
            else:
                key = (int(body["node"]), int(body["slot"]))
                actions = self.machine.message(lane, key, str(body["type"]), msg, now, wall)
            self._apply(actions)

    def _hellos(self, hellos: list[tuple[Lane, Hello]]) -> None:
        """A relay's `hellos` line: its slots' hellos, taken at one time in one call of the
        machine (their welcomes are one message, encoded once: marun.job.wire). Their node's
        connection is being read: what node 0 says on it waits until the line is read (corked),
        so nothing a hello does drops it before the next is taken."""
        now, wall = time.monotonic(), time.time()
        said: list[SaidHello] = [(lane, lane.address, msg) for lane, msg in hellos]
        with self._lock:
            self._apply(self.machine.hellos(said, now, wall))

    def _beats(self, conn: Conn, node: int, beats: list[SlotBeat]) -> None:
        """A relay's `beats` line: each slot's heartbeat, in one call of the machine under one
        take of the lock (1,638 a second at 4,096 x 8; one pass, no object per entry)."""
        now, wall = time.monotonic(), time.time()
        lane = self.port.lane
        taken: list[EntryBeat] = [
            (
                lane(conn, slot),
                (node, slot),
                idle,
                cpu,
                None if progress is None else progress_of(progress),
            )
            for slot, idle, cpu, progress in beats
        ]
        with self._lock:
            actions = self.machine.beats(taken, now, wall)
            if actions:
                self._apply(actions)

    def _group_beats(self, hub: Conn, beats: list[NodeBeats]) -> None:
        """A hub's `groupbeats` line (marun.plan.hubs): its group's slots' heartbeats, each taken
        as its node's own `beats` entry would be, on the member's own lane; a member without one
        (its connection closed, or not yet welcomed) is skipped, not refused: the hub vouches
        for what its group's relays said, node 0 for whom it holds. Each node spoken for has node
        0's heartbeats through the hub from now on."""
        now, wall = time.monotonic(), time.time()
        taken = beats  # (steps: dicts on the wire, the machine's progress reports)
        if any(entry[3] is not None for entry in beats):  # (steps where ranks print them)
            taken = [
                (node, i, c, s if s is None else [p if p is None else progress_of(p) for p in s])
                for node, i, c, s in beats
            ]
        with self._lock:
            actions, lanes = self.machine.group_beats(taken, now, wall)
            for conn in {lane.conn for lane in lanes if isinstance(lane, Lane)}:
                if conn is not hub:
                    self.port.beats.via(conn, hub, now)
            if actions:
                self._apply(actions)

    def _closed(self, lane: Lane) -> None:
        self.machine.closed(lane, time.monotonic())

    def _apply(self, actions: list[Action]) -> None:
        """What the machine decided, in its order (the lock held)."""
        port = self.port
        for action in actions:
            if isinstance(action, Send):
                member = self.members.get(action.key)
                if member is not None and isinstance(member.conn, Lane):
                    port.send_lane(member.conn, action.message)
            elif isinstance(action, Bind):  # (second: each hello's, 32,768 at 4,096 x 8)
                if isinstance(action.handle, Lane):
                    port.bind(action.handle, action.key)
            elif isinstance(action, Broadcast):
                # the part common to all is encoded once (marun.job.signing), and goes once per
                # connection: a node's relay hands it to each of its slots node 0 welcomed
                template = port.template(action.message)
                members = self.members.values()
                conns = {m.conn.conn: 0 for m in members if isinstance(m.conn, Lane)}
                for conn in conns:
                    port.send_signed(conn, template)
            elif isinstance(action, Log):
                self._log(action.event, action.level, **action.fields)
            elif isinstance(action, Announce):
                self._announce(action.text)
            elif isinstance(action, WriteReport):
                self._write_own_report()
            else:
                self._apply_to_conn(action)

    def _apply_to_conn(self, action: Action) -> None:
        port = self.port
        if isinstance(action, Drop) and isinstance(action.handle, Lane):
            port.drop_lane(action.handle)
        elif isinstance(action, Refuse) and isinstance(action.handle, Lane):
            port.refuse(action.handle.conn, action.why)
            if action.close:
                port.drop_lane(action.handle)
        elif isinstance(action, TurnAway) and isinstance(action.handle, Lane):
            port.turn_away_lane(action.handle, action.why)

    # -- the report -------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """job.json's content (marun.job.report)."""
        from marun.job.report import state_report

        with self._lock:
            return state_report(self.machine.job, self.refused)

    def _write_own_report(self) -> None:
        """job.json into the report directory, once, logged either way (the lock held): as the
        job ends (before `done`), or when node 0 closes without having got there."""
        if self._report_dir is None or self.report_path is not None:
            return
        with self.port.reserve.released():  # the imports read files too
            from marun.job.report import state_report, write_job_json

            try:
                report = state_report(self.machine.job, self.refused)
                self.report_path = write_job_json(report, self._report_dir)
                self._log("job_report_written", path=self.report_path)
            except OSError as exc:
                self._log("job_report_not_written", "warning", error=exc.strerror)

    def write_report(self, directory: str) -> str:
        """job.json into `directory` now, with the reserved descriptor free for it (the port may
        have taken every other one; the imports read files too)."""
        with self.port.reserve.released():
            from marun.job.report import write_job_json

            return write_job_json(self.report(), directory)


def console_line(text: str) -> None:
    """A line on marun's console (stderr), never raising: node 0's announcements, and a node's
    preflight warnings (marun.job.member)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
