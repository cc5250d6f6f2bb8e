"""Start this node's processes and own them until the end, like an init.

The main thread owns the job: one loop waits (selectors) on the signal pipe and the job's link,
reaps whatever ended (`waitpid(-1)`, orphans included), restarts or fails fast, and moves the
shutdown on. It alone starts processes (their PR_SET_PDEATHSIG is tied to the thread that forked
them, which must outlive them), signals them, and touches the records, the phase and the log.
The output pipes are not in that loop: each has a pump thread (marun.runtime.output.Relay) that
reads it and writes the process's log, the console and its tail, so that moving bytes takes
every core while the loop stays free for signals. What a pump shares with the loop is limited to
values that are safe across threads: the tail deque (appends), `JobLink.activity()` (one
timestamp), a queue of log-write errors the loop reports, and the `Pump.done` event a failure
waits on (briefly) so that its tail holds the process's last lines. At the end the loop drains
the relay (what is in each pipe, without waiting for writers that live on) and joins the pumps
before the log files close and the result is written. Each planned process is the leader of its
own session, so a signal sent to its process group reaches what it started too. Everything it is
told comes from the plan: `plan.supervision` (grace period, restart limits, console selection,
where result.json goes) and each process's spec (a process is restarted only when its
`restart_on_failure` says so); it reads no settings or environment of its own.

The exit code, decided by the first cause of the end:
- every non-daemon process exited 0: 0 (daemons are then stopped; that is still success);
- a process failed (non-zero, not restarted): its code, 128+N when signal N ended it;
- SIGTERM/SIGINT/SIGHUP/SIGQUIT came first: 128+N, whatever the processes did with the relayed
  signal (they are interrupted work; each one's own status is in result.json), except that a
  plan of daemons only (sshd on an MPI worker node) ends normally that way and exits 0.
A failure or signal arriving while the job is already stopping changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from typing import TYPE_CHECKING

from marun.errors import bad_value
from marun.exit_codes import cannot_start_exit
from marun.plan.launch_plan import LaunchPlan, NodePlan
from marun.runtime import early_signals
from marun.runtime.direct_log import DirectLogs
from marun.runtime.output import (
    Console,
    OutputStream,
    Pump,
    Relay,
    end_the_line,
    new_tail,
    open_log,
    widen_pipe,
)
from marun.runtime.phase import LIVE, Phase
from marun.runtime.reaper import (
    Ending,
    become_subreaper,
    reap,
)
from marun.runtime.result import (
    JobRecord,
    ProcessRecord,
    describe,
)
from marun.runtime.signals import (
    SignalPipe,
    signal_name,
)
from marun.runtime.spawn import spawn
from marun.runtime.supervisor_rounds import SupervisorRounds, process_end
from marun.runtime.supervisor_stop import (
    DRAIN_WAIT,
    OTHERS_MARGIN,
    TAIL_WAIT,
    TICK,
)

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

    from marun.runtime.stacks import StackDumps

if TYPE_CHECKING:
    from marun.runtime.joblink import JobEvent, JobLink


class Supervisor(SupervisorRounds):
    """Runs `node` (one of `plan`'s nodes) under `plan.supervision` to the end: `run()` returns
    marun's exit code. `console` is marun's stdout unless given."""

    def __init__(
        self,
        plan: LaunchPlan,
        node: NodePlan,
        console: Console | None = None,
        link: JobLink | None = None,
        shared_console: bool = False,
    ) -> None:
        # The log (structlog) is imported once every process has started: it costs more than
        # starting them. Until then events wait here, with the time they happened.
        self._log: FilteringBoundLogger | None = None
        self._early: list[tuple[str, str, dict[str, object], float]] | None = []
        self._options = plan.supervision
        self._console_selection = plan.supervision.console
        self._console = Console() if console is None else console
        self._node = node
        self.job = JobRecord(
            mode=plan.mode,
            node=node.index,
            host=node.host,
            processes=[ProcessRecord(spec=p, tail=new_tail()) for p in node.processes],
        )
        self._records = self.job.processes
        self._log_fds = _prepare(self._records)
        self._running: dict[int, tuple[ProcessRecord, subprocess.Popen[bytes]]] = {}
        self._groups: set[int] = set()  # every process group started, leader alive or not
        self._pending: dict[int, float] = {}  # record index -> monotonic time of its restart
        # ARRIVING only where the job spans nodes: nothing starts before node 0 says `start`.
        self._phase = Phase.ARRIVING if link is not None else Phase.RUNNING
        self._deadline = 0.0
        self._others_due: float | None = None  # fail_fast off: when to stop the others anyway
        self._signalled: set[int] = set()  # adopted orphans signalled one by one while stopping
        self._stop_sig = int(signal.SIGTERM)
        self._last_scan = 0.0
        self._children_left = True
        self._subreaper = False
        self._sel: selectors.BaseSelector = selectors.DefaultSelector()
        # The output pipes: one pump thread each (marun.runtime.output), none in this loop.
        self._relay = Relay()
        self._pumps: dict[int, Pump] = {}  # record index -> the pump of its latest attempt
        self._log_errors: deque[tuple[str, str, OSError]] = deque()  # from the pumps
        # The processes not shown on the console write their logs themselves (no pump).
        self._direct = DirectLogs(self._log_fds, [rec.spec.log for rec in self._records])
        hang = plan.coordination.hang_timeout if plan.coordination is not None else None
        if link is not None and hang is not None:  # the hang watchdog's input: their growth
            self._direct.watch(link.activity, hang)
        self._daemons_only = all(rec.spec.daemon for rec in self._records)
        # The rest of the job (multi-node plans with a coordination section): nothing starts
        # before every node has arrived; a stop from node 0 ends this node like a failure here.
        self._link = link
        self._job_stop: JobEvent | None = None
        self._stacks: StackDumps | None = None  # the hang watchdog's py-spy dumps, off the loop
        coord = plan.coordination
        # Where the nodes share one console (marun simulate), the leader's marun alone prints the
        # job's first failure with its last lines; the others one line per process.
        self._tail_on: int | None = None
        if shared_console and coord is not None and (coord.index, coord.slot) != (coord.leader, 0):
            self._tail_on = coord.leader
        self._init_rounds()

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        self._subreaper = become_subreaper()
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()  # the console writes to fd 1 directly, after anything buffered
        try:
            with SignalPipe() as sigs:
                self._sel.register(sigs.fileno(), selectors.EVENT_READ, None)
                early = early_signals.first()  # one that came before this pipe listened
                self.job.started = time.time()
                if early is not None:
                    self._on_signals([early])  # nothing starts; the job hears of it
                if self._link is not None:
                    # Nothing starts before every node of the job has arrived (node 0 says).
                    self._sel.register(self._link.fileno(), selectors.EVENT_READ, "job")
                elif self._phase in LIVE:
                    self._start_all()
                while not self._finished():
                    for key, _ in self._sel.select(self._timeout()):
                        if key.data is None:
                            self._on_signals(sigs.drain())
                        elif key.data == "job":
                            self._on_job(self._link.poll() if self._link else [])
                    self._reap()
                    self._restart_due()
                    self._advance()
                    self._report_log_errors()
                self._drain_outputs()  # with the signals still caught
        finally:
            # Whatever happened above (even a bug), no process marun started outlives it.
            if self._running:
                self._signal_everything(signal.SIGKILL)
            drained = self._drain_outputs()
            self._log_early_events()
            self._report_log_errors()
            self._sel.close()
            if self._stacks is not None:
                self._stacks.close()
            self._direct.close()
            if drained:  # else a pump still holds them, and marun is about to exit
                for fd in self._log_fds:
                    os.close(fd)
        return self._finish()

    def _start_all(self) -> None:
        self.job.started = time.time()
        self._start_round(0, {})
        self._log_early_events()

    def _on_job(self, events: list[JobEvent]) -> None:
        for event in events:
            if event.kind == "start" and self._phase is Phase.ARRIVING:
                if event.code == 0 and not self.job.rounds:
                    self._emit("job_started")
                    self._start_all()
                else:  # a restart round's (marun.runtime.supervisor_rounds)
                    self._start_round(event.code, dict((event.failure or {}).get("ports", {})))
                    self._log_early_events()
            elif event.kind == "restart":
                self._on_restart(event.code, event.failure)
            elif event.kind == "dump" and self._phase is Phase.RUNNING:
                # code 1: the watchdog's sample (to compare with another): not written to logs
                self._request_stacks(sample=event.code == 1)
            elif event.kind == "stop" and self._job_stop is None:
                # Kept even when this node is already stopping: the job's first failure is
                # printed at the end whichever node it was on.
                self._job_stop = event
                if self._phase not in LIVE:
                    continue
                self._pending.clear()
                self.job.exit_code = event.code
                self.job.outcome = "failed" if event.code else "succeeded"
                reason = "job done" if not event.code else "job stopped by node 0"
                self._emit("job_stop", "error" if event.code else "info", code=event.code)
                self._begin_stop(reason, signal.SIGTERM)

    def _request_stacks(self, sample: bool) -> None:
        """py-spy takes seconds a process: the dumps run in marun.runtime.stacks' own thread,
        and the loop goes on. It gets what to dump, with its own descriptor of each log."""
        from marun.runtime.stacks import StackDumps, Target

        if self._link is None:
            return
        if self._stacks is None:
            self._stacks = StackDumps(self._link.report_stacks)
        targets = []
        for pid, (rec, _) in sorted(self._running.items()):
            if rec.spec.daemon:
                continue
            fd = None if sample else os.dup(self._log_fds[self._records.index(rec)])
            targets.append(Target(pid, rec.spec.name, rec.spec.rank, fd))
        self._stacks.request(targets)

    def _finished(self) -> bool:
        return self._phase not in LIVE and (not self._children_left or self._phase is Phase.GAVE_UP)

    def _timeout(self) -> float:
        now = time.monotonic()
        due = [t - now for t in self._pending.values()]
        if self._phase in (Phase.STOPPING, Phase.KILLING, Phase.RESTARTING):
            due.append(self._deadline - now)
        elif self._others_due is not None:
            due.append(self._others_due - now)
        return max(0.0, min([TICK, *due]))

    # -- starting ---------------------------------------------------------------------------

    def _start(self, index: int) -> bool:
        rec = self._records[index]
        spec = rec.spec
        shown = self._console_selection.shows(spec.name, spec.role, spec.rank)
        # Not shown: its log is its stdout and stderr, marun not in between (direct_log.py).
        read_fd, write_fd = os.pipe() if shown else (-1, self._direct.begin(index))
        if shown:
            widen_pipe(read_fd)
        now = time.time()
        try:
            popen = spawn(self._spec_of_round(spec), write_fd)
        except OSError as exc:
            if shown:
                os.close(read_fd)
            rec.error = f"cannot start {spec.argv[0]!r}: {exc.strerror}"
            code = cannot_start_exit(exc.errno)
            rec.started = rec.started or now
            rec.ended = now
            rec.ending = Ending(code)
            self._emit("process_failed_to_start", "error", process=spec.name, error=rec.error)
            self._fail(rec)
            return False
        finally:
            if shown:
                os.close(write_fd)
        self._running[popen.pid] = (rec, popen)
        self._groups.add(popen.pid)
        if not spec.daemon:
            self._round_groups.add(popen.pid)
        if shown:
            prefix = (
                f"[{self._node.index}:{rec.label}] ".encode()
                if self._options.prefix_output
                else b""
            )
            stream = OutputStream(
                self._log_fds[index],
                self._console,
                prefix,
                rec.tail,
                on_log_error=functools.partial(self._on_log_error, spec.name, spec.log),
            )
            on_data = self._link.activity if self._link is not None else None
            self._pumps[index] = self._relay.start(read_fd, stream, on_data)
        rec.pids.append(popen.pid)
        rec.started = rec.started or now
        rec.ended = None
        rec.ending = None
        rec.stopped_by = None
        self._emit(
            "process_started",
            process=spec.name,
            rank=spec.rank,
            role=spec.role,
            pid=popen.pid,
            attempt=len(rec.pids),
            argv=list(spec.argv),
            log=spec.log,
        )
        return True

    # -- output -----------------------------------------------------------------------------

    def _drain_outputs(self) -> bool:
        """Take in what is left in every pipe, without waiting for writers that live on; False
        when the pumps are stuck (`DRAIN_WAIT` without a byte moved: a console nobody reads)."""
        if self._relay.closing:
            return self._relay.closed  # drained already (or tried to)
        if self._relay.close(DRAIN_WAIT):
            return True
        self._emit("output_not_drained", "warning", stuck_seconds=DRAIN_WAIT)
        return False

    # -- endings ----------------------------------------------------------------------------

    def _reap(self) -> None:
        ended, self._children_left = reap()
        now = time.time()
        for pid, ending in ended:
            entry = self._running.pop(pid, None)
            if entry is None:
                self.job.orphans_reaped += 1
                continue
            rec, popen = entry
            popen.returncode = ending.code if ending.signal is None else -ending.signal
            rec.ending = ending
            rec.ended = now
            self._emit(
                "process_exited",
                process=rec.spec.name,
                rank=rec.spec.rank,
                pid=pid,
                exit_code=ending.code,
                signal=None if ending.signal is None else signal_name(ending.signal),
            )
            if self._phase is Phase.RUNNING and ending.code != 0:
                self._on_failure(rec)
        if not self._subreaper and not self._running:
            # Without adoption, orphans are not ours to wait for: the planned ones are all.
            self._children_left = False

    def _on_failure(self, rec: ProcessRecord) -> None:
        if rec.spec.restart_on_failure and rec.restarts < self._options.recovery_restarts:
            index = self._records.index(rec)
            self._pending[index] = time.monotonic() + self._options.recovery_wait
            self._emit(
                "process_restart_scheduled",
                "warning",  # it died: a person should see it without --verbose
                process=rec.spec.name,
                rank=rec.spec.rank,
                restart=rec.restarts + 1,
                recovery_restarts=self._options.recovery_restarts,
                in_seconds=self._options.recovery_wait,
            )
            return
        self._fail(rec)

    def _fail(self, rec: ProcessRecord) -> None:
        if self._phase not in LIVE or self.job.first_failure is not None:
            return
        assert rec.ending is not None
        lines = self._direct.read_tail(self._records.index(rec))  # None: its pump keeps them
        if lines is not None:
            rec.tail.clear()
            rec.tail.extend(lines)
        self.job.first_failure = rec
        self.job.outcome = "failed"
        self.job.exit_code = rec.ending.code
        self._emit(
            "job_failed",
            "error",
            process=rec.spec.name,
            rank=rec.spec.rank,
            status=describe(rec.ending),
        )
        if self._failure_to_round(rec):
            pass  # a restart round (marun.runtime.supervisor_rounds), or node 0's stop
        elif self._options.fail_fast:
            self._begin_stop("failure", signal.SIGTERM)
        else:
            self._others_due = time.monotonic() + self._options.grace_period + OTHERS_MARGIN
        if self._link is not None:
            # The last lines it wrote may still be in its pipe: its pump takes them in first
            # (the end of the pipe comes at once unless something it started holds it open).
            pump = self._pumps.get(self._records.index(rec))
            if pump is not None:
                pump.done.wait(TAIL_WAIT)
            self._link.report_failure(
                {
                    **process_end(rec),
                    "log": rec.spec.log,
                    "tail": list(rec.tail)[-20:],
                    "uptime": round(self.round_uptime(), 3),
                }
            )

    def _restart_due(self) -> None:
        now = time.monotonic()
        for index, due in sorted(self._pending.items()):
            if due <= now and self._phase is Phase.RUNNING:
                del self._pending[index]
                rec = self._records[index]
                self._emit(
                    "process_restarting",
                    process=rec.spec.name,
                    rank=rec.spec.rank,
                    restart=rec.restarts + 1,
                    recovery_restarts=self._options.recovery_restarts,
                )
                rec.tail.clear()
                end_the_line(self._log_fds[index])
                self._start(index)


def _prepare(records: list[ProcessRecord]) -> list[int]:
    """Everything that can be refused (a cwd or log that cannot be created), done before the
    first process starts: each process's log descriptor."""
    for rec in records:
        try:
            os.makedirs(rec.spec.cwd, exist_ok=True)
        except OSError as exc:
            raise bad_value(
                f"working directory of {rec.spec.name}",
                rec.spec.cwd,
                f"a directory marun can create ({exc.strerror})",
            ) from None
    return [open_log(rec.spec.log) for rec in records]
