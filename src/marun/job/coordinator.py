"""Node 0's side: a thread in the leader's marun that every node's marun (its own included)
reports to. It counts arrivals and opens the start barrier, turns the first failure anywhere into
a stop sent to every node, declares a node that went silent for peer_timeout failed, watches for
a job-wide hang, and gathers each node's end for job.json.

Messages in (member -> coordinator): hello {nonce, instance, leader, started}, hb {idle, cpu},
failure {failure}, stacks {text}, end {outcome, exit_code}. Out: challenge {nonce, instance}
(first, on every connection), welcome {instance}, start, hb, dump, stop {code, failure}, done
{code}, refused {why} (then the connection is closed). Replay protection: marun.job.protocol.

Nothing that arrives on the port may end this thread: every line goes through protocol.decode
(which refuses whatever is not a well-typed message of this job), and the loop catches anything
unexpected, logs it with its traceback and goes on (marun.job.limits bounds what the network
may cost it).

Who is who: `instance` is a fresh nonce of each marun process (node 0's is the coordinator's).
A member that says hello with another instance than the one its node had is a new marun on
that node: `_came_back` decides what that means (before the start: the pod was recreated,
welcome; after it: a rejoin in a restart round if there is one, else a failure of the job).
Restart rounds (`restart`, `stopped`, `running`, `start` with a round): marun.job.restart_rounds.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from marun.exit_codes import HANG_EXIT, LOST_EXIT, failure_exit
from marun.job.hang import HangJudge, describe_stacks
from marun.job.limits import (
    RefusalLog,
    Reserve,
    listen_backlog,
)
from marun.job.phases import JOB_MOVES, JobPhase
from marun.job.protocol import (
    clean_failure,
    new_nonce,
)
from marun.job.restart_rounds import RestartRounds
from marun.job.wire import TICK, Conn
from marun.plan.coordination import HEARTBEAT, Coordination
from marun.runtime.rounds import RoundRule

_DUMP_WAIT = 15.0  # seconds the watchdog waits for every node's stacks
_STALL = 3 * HEARTBEAT  # the loop runs every TICK: a gap this long means it was not running
# After the start, a member whose connection closed without its `end` is lost this long after,
# unless its marun reconnects meanwhile (a member reconnects at once after a drop).
CLOSED_LOST = 2.0
LATE_WAIT = 3.0  # after a stop, how long a node not (or no longer) present is waited for


class Coordinator(RestartRounds):
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
    ) -> None:
        self.coord = coord
        # job.json's directory: node 0 writes it itself, as the job ends (or at close)
        self._report_dir = report_dir
        self.report_path: str | None = None
        self._secret = secret
        self._announce = announce or _stderr_line
        self._log = log or (lambda event, level="info", **kw: None)
        self._lock = threading.Lock()
        self._sel = selectors.DefaultSelector()
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("", coord.port))
        self._server.listen(listen_backlog(coord.nodes * coord.slots))
        self._server.setblocking(False)
        self._sel.register(self._server, selectors.EVENT_READ, None)
        self._reserve = Reserve()
        self._refusals = RefusalLog(self._log)
        self.instance = new_nonce()  # this coordinator's: a restarted node 0 has another
        self.errors = 0  # unexpected exceptions caught by the loop (logged each)
        self._wire_init()  # _conns, members (a Roster), the heartbeat schedule: wire.py
        self.started_at = time.time()
        self._t0 = time.monotonic()
        # Where the job is (marun.job.phases: the transitions); `stopped` is the stop message
        # sent on entering STOPPING, `_start_at` when `start` went out (None: never).
        self.phase = JobPhase.GATHERING
        self._start_at: float | None = None
        self.stopped: dict[str, Any] | None = None  # the stop sent: {code, failure}
        self._stopped_at = 0.0  # monotonic: when
        self.first_failure: dict[str, Any] | None = None
        self.exit_code: int | None = None
        self._allowed: set[str] | None = None
        self._allowed_at = 0.0
        self._dump_since: float | None = None  # DUMPING: when `dump` went out
        self._hang_why = ""
        self._hang: HangJudge | None = None
        self._new_hang_judge()
        # Restart rounds (marun.job.restart_rounds); `ports`: round 0's of those that move.
        self._rule = rule if rule is not None and rule.budget > 0 else None
        self._ports = dict(ports or {})
        self._round_ports: dict[str, int] = {}
        self.rounds: list[dict[str, Any]] = []
        self._round_since = 0.0
        self._round_failure: dict[str, Any] = {}
        self._last_run = time.monotonic()
        # Not a phase of the job: another thread's request that this one finish (after DONE).
        self._close_requested = threading.Event()
        self._linger = 2.0
        self._thread = threading.Thread(target=self._loop, name="marun-coordinator", daemon=True)

    def _new_hang_judge(self) -> None:
        """A judge with no memory: at the start, and at each restart round's."""
        if self.coord.hang_timeout is not None:
            self._hang = HangJudge(
                self.coord.hang_timeout,
                lambda sample: self._broadcast("dump", sample=sample),
                self._log,
            )
        self._dump_since = None

    @property
    def done_sent(self) -> bool:
        return self.phase is JobPhase.DONE

    def _enter(self, phase: JobPhase) -> None:
        """The one place the phase changes, checked against marun.job.phases.JOB_MOVES."""
        self.phase = JOB_MOVES.move(self.phase, phase, self._log)

    @property
    def refused(self) -> int:
        return self._refusals.total

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
        try:
            while True:
                events = self._sel.select(TICK)
                self._check_stall()  # before reading what piled up meanwhile
                for key, mask in events:
                    conn = key.data
                    try:
                        if conn is None:
                            with self._reserve.lock:
                                self._accept()
                        else:
                            self._ready(conn, mask)
                    except Exception as exc:  # nothing from the port ends the job
                        self._unexpected(exc, conn)
                try:
                    if self._tick_due():  # in a large job not after every batch (wire.py)
                        with self._lock:
                            self._tick()
                except Exception as exc:
                    self._unexpected(exc, None)
                if self._close_requested.is_set():
                    closing_since = closing_since or time.monotonic()
                    live = [c for c in self._conns if c.member is not None]
                    if not live or time.monotonic() - closing_since > self._linger:
                        break
        finally:
            for conn in list(self._conns):
                self._drop(conn)
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(self._server)
            self._server.close()
            self._sel.close()
            self._reserve.close()

    def _check_stall(self) -> None:
        """This thread did not run for a while (node 0's marun frozen by SIGSTOP, or starved):
        past peer_timeout the other nodes have given up on node 0, so node 0 is the job's
        failure, and those that left ended when they gave up (peer_timeout after node 0 last
        ran), not when node 0 noticed; one that is still there says its own end later."""
        now = time.monotonic()
        last, self._last_run = self._last_run, now
        gap = now - last
        if gap < _STALL or not self.start_sent:
            return
        self._log("coordinator_stalled", "error", seconds=round(gap, 1))
        if gap < self.coord.peer_timeout:
            return
        gave_up = time.time() - gap + self.coord.peer_timeout
        with self._lock:
            self._stop(
                LOST_EXIT,
                {
                    "node": self.coord.leader,
                    "host": self.coord.host,
                    "exit_code": LOST_EXIT,
                    "why": f"node {self.coord.leader}'s marun did not run for {gap:.0f}s "
                    f"(stopped, e.g. SIGSTOP, or starved): past peer_timeout "
                    f"{self.coord.peer_timeout:g}s the other nodes gave up on it",
                },
            )
            for member in self.members.values():
                if member.ended is None and member.node != self.coord.leader:
                    member.ended = gave_up
                    member.outcome = "lost"

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
                self._drop(conn)

    # -- messages ---------------------------------------------------------------------------

    def _handle(self, conn: Conn, body: dict[str, Any]) -> None:
        key = (int(body["node"]), int(body["slot"]))
        kind = body["type"]
        if kind == "hello":
            self._hello(conn, key, body)  # marun.job.arrival
            return
        if conn.member != key or key not in self.members:
            self._refuse(conn, f"{kind} before hello")
            self._drop(conn)
            return
        member = self.members[key]
        member.last_seen = time.monotonic()
        member.last_seen_wall = time.time()
        if member.outcome == "lost" and member.conn is conn:
            self._back(member)
        if kind == "hb":
            member.idle = max(0.0, float(body.get("idle", 0.0)))
            cpu = body.get("cpu")
            if cpu is not None:
                member.cpu_history.append((member.last_seen, float(cpu)))
        elif kind == "failure":
            uptime = body.get("uptime")
            self._failure(
                clean_failure(body.get("failure") or {}),
                body.get("round"),
                None if uptime is None else float(uptime),
            )
        elif kind == "stopped":
            member.stopped_round = max(member.stopped_round, int(body.get("round", 0)))
            self._check_round(time.monotonic())
        elif kind == "running":
            self._on_running(member, int(body.get("round", 0)), int(body.get("ranks", 0)))
        elif kind == "stacks":
            member.stacks = str(body.get("text", ""))
        elif kind == "end" and member.ended is None:  # (said again after a reconnection)
            member.ended = time.time()
            member.outcome = str(body.get("outcome"))[:40]
            member.exit_code = int(body.get("exit_code", 0))
            if self.phase is JobPhase.GATHERING:
                # It ended before the job started (its marun was stopped while waiting): the
                # job cannot start without it.
                code = member.exit_code or LOST_EXIT
                self._stop(
                    code,
                    {
                        "node": key[0],
                        "host": member.host,
                        "exit_code": code,
                        "why": f"node {key[0]} ({member.host}) left before the start "
                        f"({member.outcome}, exit code {member.exit_code})",
                    },
                )

    def _failure(
        self, failure: dict[str, Any], round_: int | None = None, uptime: float | None = None
    ) -> None:
        if failure.get("stop_signal"):
            # A node's marun was told to stop (its pod deleted, a user's ^C): the job ends with
            # 128+N in every phase, a round's barrier included; it never starts a round, and no
            # round waits for the signalled node (docs/supervision.md, "Signals").
            self._stop(failure_exit(failure.get("exit_code")), failure)
            return
        if self.stopped is not None or self.phase is JobPhase.RESTARTING:
            return  # a round under way: its ranks' ends are no failures of the next
        if round_ is not None and round_ != self.round:
            return  # said in a round that is over
        code = failure_exit(failure.get("exit_code"))
        if not self._restart(code, failure, uptime):
            self._stop(code, failure)

    def _stop(self, code: int, failure: dict[str, Any]) -> None:
        if self.stopped is not None:
            return
        self.first_failure = failure
        self.exit_code = code
        self.stopped = {"code": code, "failure": failure}
        self._stopped_at = time.monotonic()
        self._enter(JobPhase.STOPPING)
        # `failed_node`, not `node`: every other event's `node` is the node that logs it.
        where = {k: failure[k] for k in ("why",) if failure.get(k)}
        if failure.get("node") is not None:
            where["failed_node"] = failure["node"]
        self._log("job_stop", "error" if code else "info", code=code, **where)
        self._broadcast("stop", **self.stopped)

    # -- time -------------------------------------------------------------------------------

    def _tick(self) -> None:
        now = time.monotonic()
        self._wire_tick(now)  # hello time-outs, slow readers, heartbeats due (wire.py)
        if self.phase is JobPhase.GATHERING:
            self._forget_departed()
            if now - self._t0 >= self.coord.arrival_timeout:
                self._arrival_failed()
            return
        # Frozen since the loop's last look (SIGSTOP between it and here): the nodes' silence is
        # node 0's own, which the next look (_check_stall) judges; none of them is lost for it.
        if now - self._last_run < _STALL:
            for member in list(self.members.values()):
                if member.ended is not None:
                    continue
                if now - member.last_seen > self.coord.peer_timeout:
                    self._lost(member)
                elif member.conn is None and now - member.closed_at > CLOSED_LOST:
                    # Its marun's connection closed without a goodbye (`end`) and no marun of
                    # its came back on a new one: its pod was deleted or its machine is gone.
                    self._lost(
                        member,
                        f"its marun's connection closed without a goodbye and it did not "
                        f"reconnect within {CLOSED_LOST:g}s (its pod deleted, or its machine "
                        "gone)",
                    )
        if self.phase is JobPhase.RESTARTING:
            self._check_round(now)
            return
        self._watch_hang(now)
        self._check_done()

    def _watch_hang(self, now: float) -> None:
        """marun.job.hang judges; once hung, every node's stacks are gathered (and written into
        each rank's log) and the job stopped with HANG_EXIT and the reason."""
        if self._hang is None or self.stopped is not None:
            return
        running = [m for m in self.members.values() if m.ended is None and not m.daemons_only]
        if not running:
            return
        if self.phase is JobPhase.RUNNING:
            idle = min(m.idle + (now - m.last_seen) for m in running)
            why = self._hang.tick(running, idle, now)
            if why is not None:
                self._hang_why = why
                self._dump_since = now
                self._enter(JobPhase.DUMPING)
                for m in running:
                    m.stacks = None
                self._log("job_hang", "error", idle_seconds=round(idle, 1), why=why)
                self._broadcast("dump")
            return
        have = all(m.stacks is not None for m in running)
        if have or now - (self._dump_since or now) >= _DUMP_WAIT:
            failure = {
                "exit_code": HANG_EXIT,
                "why": self._hang_why,
                "stacks": describe_stacks(running),
            }
            if not self._restart(HANG_EXIT, failure, None):
                self._stop(HANG_EXIT, failure)

    def _check_done(self) -> None:
        if self.done_sent:
            return
        if len(self.members) < self.expected and (
            self.stopped is None or time.monotonic() - self._stopped_at < LATE_WAIT
        ):
            # Once stopped, a node that never arrived (or did not come back to a node 0 that
            # was restarted) is waited for LATE_WAIT only: its marun retries every 0.5 s, and
            # hears the stop instead of giving up on node 0 after peer_timeout.
            return
        pending = [m for m in self.members.values() if m.ended is None]
        if pending and self.stopped is None:
            if all(m.daemons_only for m in pending):
                # TF parameter servers: they end when the job is done, not on their own.
                self.stopped = {"code": 0, "failure": None}
                self._enter(JobPhase.STOPPING)
                self._broadcast("stop", code=0, failure=None)
            return
        if pending:
            return
        self._enter(JobPhase.DONE)
        if self.exit_code is None:
            self.exit_code = next((m.exit_code for m in self.members.values() if m.exit_code), 0)
        self._write_own_report()  # before `done`: a node that ends on it finds job.json there
        self._broadcast("done", code=self.exit_code)

    # -- the report -------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """job.json's content (marun.job.report)."""
        from marun.job.report import coordinator_report

        with self._lock:
            return coordinator_report(self)

    def _write_own_report(self) -> None:
        """job.json into the report directory, once (the lock held; marun.job.report)."""
        if self._report_dir is not None and self.report_path is None:
            from marun.job.report import write_once

            with self._reserve.released():  # the imports read files too
                write_once(self, self._report_dir)

    def write_report(self, directory: str) -> str:
        """job.json into `directory` now, with the reserved descriptor free for it (the port may
        have taken every other one; the imports read files too)."""
        with self._reserve.released():
            from marun.job.report import write_job_json

            return write_job_json(self.report(), directory)


def _stderr_line(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
