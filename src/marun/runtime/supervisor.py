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
import errno
import functools
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING

from marun._files import private_dir
from marun.errors import bad_value
from marun.plan.launch_plan import LaunchPlan, NodePlan
from marun.runtime.output import Console, OutputStream, Pump, Relay, new_tail, open_log, widen_pipe
from marun.runtime.reaper import (
    Ending,
    become_subreaper,
    direct_children,
    live_groups,
    reap,
    signal_group,
)
from marun.runtime.result import (
    JobRecord,
    ProcessRecord,
    describe,
    failure_summary,
    job_failure_summary,
    nested_summary,
    write_result,
)
from marun.runtime.signals import (
    RELAYED,
    STOP,
    Interrupted,
    SignalPipe,
    exit_code_for,
    interruptible,
    signal_name,
)

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

    from marun.runtime.stacks import StackDumps

if TYPE_CHECKING:
    from marun.runtime.joblink import JobEvent, JobLink

_KILL_WAIT = 10.0  # after SIGKILL, how long to wait for the kernel to take processes away
_TICK = 0.5  # at most this long between checks, so nothing depends on a single wake-up
_DRAIN_WAIT = 10.0  # at the end, how long the relay may go without moving a byte (stuck)
_TAIL_WAIT = 1.0  # how long a failure waits for the rest of its process's output (its tail)
# fail_fast off (marun simulate's nodes, which stop one another as one job): after the first
# failure, how long beyond grace_period the others get to end by the job's own stop before they
# are stopped here. It covers a heartbeat or two and their own SIGKILL wait; a node that failed
# before its job existed (exit 2 at plan time) would otherwise leave the others waiting out
# arrival_timeout + peer_timeout.
_OTHERS_MARGIN = 15.0


def _die_with_marun_setup() -> Callable[[], None] | None:
    """A child-side hook that has the kernel SIGKILL the process when marun dies (Linux's
    PR_SET_PDEATHSIG), so that ranks never outlive a marun that was itself SIGKILLed (an OOM
    kill, `kill -9`, a node agent's force stop): they would hold the accelerators and the
    job's ports. None where it is not available; supervision works the same without it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def setup() -> None:  # runs in the child between fork and exec: a single system call
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)

    return setup


_DIE_WITH_MARUN = _die_with_marun_setup()


class Phase(Enum):
    """Where the supervisor is in a job's life (like torch elastic's `WorkerState`).

    ARRIVING  a node of a multi-node job waits for node 0's `start` (every node has arrived):
              nothing runs yet. A stop from node 0 or a stop signal moves on to STOPPING.
    RUNNING   processes start, fail, restart; the first cause of the end moves on to STOPPING.
    STOPPING  the stop signal was sent to everything; waiting `grace_period` for it to go.
    KILLING   SIGKILL was sent to what was left; waiting up to `_KILL_WAIT` for the kernel.
    GAVE_UP   processes outlived SIGKILL (stuck in the kernel): marun stops waiting and ends.

    Transitions only go forward: (ARRIVING ->) RUNNING -> STOPPING -> KILLING -> GAVE_UP, and
    ARRIVING -> STOPPING. The loop ends when no
    child is left in any phase but RUNNING, or at GAVE_UP.
    """

    ARRIVING = "arriving"
    RUNNING = "running"
    STOPPING = "stopping"
    KILLING = "killing"
    GAVE_UP = "gave up"


# The phases before the stop: a failure, a signal or node 0's stop still decides the end.
_LIVE = (Phase.ARRIVING, Phase.RUNNING)


class Supervisor:
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
        # Everything that can be refused (a cwd or log that cannot be created) is done now,
        # before the first process starts.
        for rec in self._records:
            try:
                os.makedirs(rec.spec.cwd, exist_ok=True)
            except OSError as exc:
                raise bad_value(
                    f"working directory of {rec.spec.name}",
                    rec.spec.cwd,
                    f"a directory marun can create ({exc.strerror})",
                ) from None
        self._log_fds = [open_log(rec.spec.log) for rec in self._records]
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

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        self._subreaper = become_subreaper()
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()  # the console writes to fd 1 directly, after anything buffered
        try:
            with SignalPipe() as sigs:
                self._sel.register(sigs.fileno(), selectors.EVENT_READ, None)
                self.job.started = time.time()
                if self._link is not None:
                    # Nothing starts before every node of the job has arrived (node 0 says).
                    self._sel.register(self._link.fileno(), selectors.EVENT_READ, "job")
                else:
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
            if drained:  # else a pump still holds them, and marun is about to exit
                for fd in self._log_fds:
                    os.close(fd)
        return self._finish()

    def _start_all(self) -> None:
        if self._phase is Phase.ARRIVING:
            self._phase = Phase.RUNNING
        self.job.started = time.time()
        for index in range(len(self._records)):
            if not self._start(index):
                break
        self._log_early_events()

    def _on_job(self, events: list[JobEvent]) -> None:
        for event in events:
            if event.kind == "start" and self._phase is Phase.ARRIVING:
                self._emit("job_started")
                self._start_all()
            elif event.kind == "dump" and self._phase is Phase.RUNNING:
                # code 1: the watchdog's sample (to compare with another): not written to logs
                self._request_stacks(sample=event.code == 1)
            elif event.kind == "stop" and self._job_stop is None:
                # Kept even when this node is already stopping: the job's first failure is
                # printed at the end whichever node it was on.
                self._job_stop = event
                if self._phase not in _LIVE:
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
        return self._phase not in _LIVE and (
            not self._children_left or self._phase is Phase.GAVE_UP
        )

    def _timeout(self) -> float:
        now = time.monotonic()
        due = [t - now for t in self._pending.values()]
        if self._phase in (Phase.STOPPING, Phase.KILLING):
            due.append(self._deadline - now)
        elif self._others_due is not None:
            due.append(self._others_due - now)
        return max(0.0, min([_TICK, *due]))

    # -- starting ---------------------------------------------------------------------------

    def _start(self, index: int) -> bool:
        rec = self._records[index]
        spec = rec.spec
        env = dict(os.environ)
        env.update(spec.env)
        read_fd, write_fd = os.pipe()
        widen_pipe(read_fd)
        now = time.time()
        try:
            popen = subprocess.Popen(
                list(spec.argv),
                cwd=spec.cwd,
                env=env,
                stdout=write_fd,
                stderr=write_fd,
                start_new_session=True,
                # One prctl call between fork and exec: no lock is taken, so threads (the relay's
                # pumps, the job link's) cannot deadlock it.
                preexec_fn=_DIE_WITH_MARUN,  # noqa: PLW1509
            )
        except OSError as exc:
            os.close(read_fd)
            rec.error = f"cannot start {spec.argv[0]!r}: {exc.strerror}"
            code = 126 if exc.errno in (errno.EACCES, errno.ENOEXEC, errno.EISDIR) else 127
            rec.started = rec.started or now
            rec.ended = now
            rec.ending = Ending(code)
            self._emit("process_failed_to_start", "error", process=spec.name, error=rec.error)
            self._fail(rec)
            return False
        finally:
            os.close(write_fd)
        shown = self._console_selection.shows(spec.name, spec.role, spec.rank)
        prefix = (
            f"[{self._node.index}:{rec.label}] ".encode() if self._options.prefix_output else b""
        )
        stream = OutputStream(
            self._log_fds[index],
            self._console if shown else None,
            prefix,
            rec.tail,
            on_log_error=functools.partial(self._on_log_error, spec.name, spec.log),
        )
        self._running[popen.pid] = (rec, popen)
        self._groups.add(popen.pid)
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
        when the pumps are stuck (`_DRAIN_WAIT` without a byte moved: a console nobody reads)."""
        if self._relay.closing:
            return self._relay.closed  # drained already (or tried to)
        if self._relay.close(_DRAIN_WAIT):
            return True
        self._emit("output_not_drained", "warning", stuck_seconds=_DRAIN_WAIT)
        return False

    def _on_log_error(self, name: str, log: str, exc: OSError) -> None:
        """From a pump thread: the main loop says it (the log and its early list are its own)."""
        self._log_errors.append((name, log, exc))

    def _report_log_errors(self) -> None:
        while self._log_errors:
            name, log, exc = self._log_errors.popleft()
            self._log_not_written(name, log, exc)

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
        if rec.spec.restart_on_failure and rec.restarts < self._options.max_restarts:
            index = self._records.index(rec)
            self._pending[index] = time.monotonic() + self._options.recovery_wait
            self._emit(
                "process_restart_scheduled",
                "warning",  # it died: a person should see it without --verbose
                process=rec.spec.name,
                rank=rec.spec.rank,
                restart=rec.restarts + 1,
                max_restarts=self._options.max_restarts,
                in_seconds=self._options.recovery_wait,
            )
            return
        self._fail(rec)

    def _fail(self, rec: ProcessRecord) -> None:
        if self._phase not in _LIVE or self.job.first_failure is not None:
            return
        assert rec.ending is not None
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
        if self._options.fail_fast:
            self._begin_stop("failure", signal.SIGTERM)
        else:
            self._others_due = time.monotonic() + self._options.grace_period + _OTHERS_MARGIN
        if self._link is not None:
            # The last lines it wrote may still be in its pipe: its pump takes them in first
            # (the end of the pipe comes at once unless something it started holds it open).
            pump = self._pumps.get(self._records.index(rec))
            if pump is not None:
                pump.done.wait(_TAIL_WAIT)
            self._link.report_failure(
                {
                    "name": rec.spec.name,
                    "rank": rec.spec.rank,
                    "exit_code": rec.ending.code,
                    "signal": None if rec.ending.signal is None else signal_name(rec.ending.signal),
                    "log": rec.spec.log,
                    "tail": list(rec.tail)[-20:],
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
                    max_restarts=self._options.max_restarts,
                )
                rec.tail.clear()
                self._start(index)

    def _advance(self) -> None:
        if self._phase is Phase.RUNNING and self._stop_the_others():
            return
        if self._phase is Phase.RUNNING:
            waiting = [
                r for i, r in enumerate(self._records) if r.ending is None or i in self._pending
            ]
            workers = [r for r in self._records if not r.spec.daemon]
            if workers and all(r.ending is not None and r.ending.code == 0 for r in workers):
                self._begin_stop("done", signal.SIGTERM)
            elif not waiting:
                # Daemons only, and all of them have ended on their own (with 0: a non-zero end
                # is a failure above).
                self._begin_stop("done", signal.SIGTERM)
            return
        now = time.monotonic()
        if self._phase is Phase.STOPPING and now >= self._deadline:
            self._phase = Phase.KILLING
            self._deadline = now + _KILL_WAIT
            self._emit("killing", "warning", after_grace_seconds=self._options.grace_period)
            self._signal_everything(signal.SIGKILL)
        elif self._phase is Phase.KILLING and now >= self._deadline:
            self._phase = Phase.GAVE_UP
            left = [pid for pid, _ in direct_children()] or sorted(self._running)
            self._emit("processes_left_after_sigkill", "error", pids=left)
        elif self._children_left and now - self._last_scan >= _TICK:
            # Orphans adopted while stopping get the same signal as everyone before them.
            self._last_scan = now
            self._signal_orphans(signal.SIGKILL if self._phase is Phase.KILLING else self._stop_sig)

    def _stop_the_others(self) -> bool:
        """fail_fast off: once the others have had their window after the first failure, stop
        them here (True when that began)."""
        if self._others_due is None or time.monotonic() < self._others_due:
            return False
        window = self._options.grace_period + _OTHERS_MARGIN
        self._emit("others_stopped_after_failure", "warning", after_seconds=window)
        self._begin_stop(f"still running {window:g}s after the first failure", signal.SIGTERM)
        return True

    # -- signals ----------------------------------------------------------------------------

    def _on_signals(self, numbers: list[int]) -> None:
        for signum in numbers:
            if signum not in RELAYED:
                continue  # SIGCHLD: every wake-up reaps anyway
            self._emit(
                "signal_received", "warning", signal=signal_name(signum), phase=self._phase.value
            )
            if signum in STOP and self._phase in _LIVE:
                self._pending.clear()
                if self._daemons_only:
                    self.job.outcome = "succeeded"
                    self.job.exit_code = 0
                else:
                    self.job.outcome = "interrupted"
                    self.job.exit_code = exit_code_for(signum)
                self.job.signal = signum
                before_start = self._phase is Phase.ARRIVING
                self._begin_stop(f"received {signal_name(signum)}", signum)
                self._signal_to_job(signum, before_start)
            elif signum in STOP:
                self._signal_everything(signum)
            else:
                for pid in list(self._running):
                    signal_group(pid, signum)

    def _signal_to_job(self, signum: int, before_start: bool) -> None:
        """A stop signal to this node's marun (the platform deleting its pod, a user's ^C) is a
        failure of the whole job, mid-run or while the nodes gather: node 0 stops every node
        with 128+N (docs/supervision.md, "Signals")."""
        if self._link is None:
            return
        name = signal_name(signum)
        self._link.report_failure(
            {
                "exit_code": exit_code_for(signum),
                "signal": name,
                "why": f"node {self._node.index} ({self._node.host}) stopped by {name}"
                + (" before the start" if before_start else ""),
            }
        )

    def _begin_stop(self, reason: str, signum: int) -> None:
        if self._phase not in _LIVE:
            return
        self._phase = Phase.STOPPING
        self._stop_sig = signum
        self._pending.clear()
        self._deadline = time.monotonic() + self._options.grace_period
        if self._running or self._children_left:
            self._emit(
                "stopping",
                reason=reason,
                signal=signal_name(signum),
                grace_seconds=self._options.grace_period,
                running=len(self._running),
            )
        self._signal_everything(signum)

    def _signal_everything(self, signum: int) -> None:
        """Signal every process group marun started that still has a member, then any adopted
        orphan outside those groups (a daemon that made its own session)."""
        for rec, _ in self._running.values():
            if rec.stopped_by != signal.SIGKILL:
                rec.stopped_by = signum
        groups = live_groups(self._groups)
        for pgid in groups:
            signal_group(pgid, signum)
        self._signalled.clear()
        self._signal_orphans(signum, groups)

    def _signal_orphans(self, signum: int, groups: set[int] | None = None) -> None:
        groups = live_groups(self._groups) if groups is None else groups
        for pid, pgid in direct_children():
            if pgid in groups or pid in self._signalled:
                continue
            self._signalled.add(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    # -- the end ----------------------------------------------------------------------------

    def _finish(self) -> int:
        job = self.job
        job.ended = time.time()
        directory = self._record_dir()
        path: str | None = None
        try:
            path = write_result(directory, job)
        except OSError as exc:
            self._emit("result_not_written", "warning", directory=directory, error=exc.strerror)
        if job.first_failure is not None and self._link is None:
            # A coordinated node prints the job's summary instead, once the job has ended.
            self._say(failure_summary(job) if self._options.prefix_output else nested_summary(job))
        code = job.exit_code
        if self._link is not None:
            code = self._end_of_job(directory)
        self._emit(
            "job_finished",
            outcome=job.outcome,
            exit_code=code,
            orphans_reaped=job.orphans_reaped,
            result=path,
        )
        return code

    def _end_of_job(self, directory: str) -> int:
        """Tell node 0 how this node ended, wait for the job's end, print its first failure."""
        assert self._link is not None
        try:
            with interruptible():
                code = self._link.report_end(self.job.outcome, self.job.exit_code, directory)
        except Interrupted as exc:
            # Stopped while waiting for the rest of the job (the platform ends the pod).
            self._emit("signal_received", "warning", signal=signal_name(exc.signum), phase="end")
            code = self.job.exit_code or 128 + exc.signum
        stop = self._job_stop
        for event in self._link.poll():
            if event.kind == "stop" and stop is None:
                stop = event
        self._link.close()
        if stop is not None and stop.code:
            summary = job_failure_summary(self.job, stop.code, stop.failure or {}, self._tail_on)
            self._say(summary)
        elif self.job.first_failure is not None:
            self._say(failure_summary(self.job))
        return code

    def _record_dir(self) -> str:
        """Where result.json and marun's events file go."""
        return self._options.record_dir or os.path.dirname(self._records[0].spec.log)

    @staticmethod
    def _say(text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(text)
            sys.stderr.flush()

    def _log_early_events(self) -> None:
        if self._early is None:
            return
        from marun.log import get_logger

        early, self._early = self._early, None
        self._log = get_logger("marun.runtime.supervisor")
        from marun.log import log_to_file

        # marun's own events go to the events file beside result.json; the console gets only
        # what needs a person (marun.log says which).
        with contextlib.suppress(OSError):
            log_to_file(private_dir(self._record_dir(), strict=False))
        for event, level, fields, at in early:
            self._emit(event, level, _at=at, **fields)

    def _log_not_written(self, name: str, log: str, exc: OSError) -> None:
        self._emit(
            "log_not_written",
            "warning",
            process=name,
            log=log,
            error=exc.strerror,
            detail="the rest of this process's output reaches the console only",
        )

    def _emit(self, event: str, level: str = "info", **fields: object) -> None:
        """A structlog event; a closed stderr must not stop the supervision."""
        if self._early is not None:
            self._early.append((event, level, fields, time.time()))
            return
        # The simulator's supervisor (prefix_output off: its processes are whole `marun run`s,
        # one per simulated node, each naming itself) is no node of the job: its events name the
        # process (node1, ...), not a node index of its own that would read as node 0.
        where = {"node": self._node.index} if self._options.prefix_output else {}
        with contextlib.suppress(OSError, ValueError):
            getattr(self._log, level)(event, **where, **fields)
