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
import sys
import time
from typing import TYPE_CHECKING

from marun.errors import bad_value
from marun.exit_codes import cannot_start_exit
from marun.plan.launch_plan import LaunchPlan, NodePlan
from marun.runtime import early_signals, node_report, node_stop
from marun.runtime.direct_log import DirectLogs
from marun.runtime.node_rounds import NodeRounds, process_end
from marun.runtime.node_state import NodeState
from marun.runtime.node_stop import DRAIN_WAIT, OTHERS_MARGIN, TAIL_WAIT, TICK
from marun.runtime.output import (
    Console,
    OutputStream,
    Pump,
    Relay,
    end_the_line,
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
    ProcessRecord,
    describe,
)
from marun.runtime.signals import (
    SignalPipe,
    signal_name,
)
from marun.runtime.spawn import spawn

if TYPE_CHECKING:
    from marun.runtime.joblink import JobEvent, JobLink
    from marun.runtime.stacks import StackDumps


class Supervisor:
    """Runs `node` (one of `plan`'s nodes) under `plan.supervision` to the end: `run()` returns
    marun's exit code. `console` is marun's stdout unless given. It composes the node's state
    (marun.runtime.node_state) and the parts that act on it: the stop and signals
    (marun.runtime.node_stop), restart rounds (marun.runtime.node_rounds), the end and its
    record (marun.runtime.node_report); it owns the loop, the processes' start and output."""

    def __init__(
        self,
        plan: LaunchPlan,
        node: NodePlan,
        console: Console | None = None,
        link: JobLink | None = None,
        shared_console: bool = False,
    ) -> None:
        st = self.state = NodeState(plan, node, link, shared_console)
        self.job = st.job
        self._console_selection = plan.supervision.console
        self._console = Console() if console is None else console
        st.log_fds = _prepare(st.records)
        self._sel: selectors.BaseSelector = selectors.DefaultSelector()
        # The output pipes: one pump thread each (marun.runtime.output), none in this loop.
        self._relay = Relay()
        self._pumps: dict[int, Pump] = {}  # record index -> the pump of its latest attempt
        # The processes not shown on the console write their logs themselves (no pump).
        self._direct = DirectLogs(st.log_fds, [rec.spec.log for rec in st.records])
        hang = plan.coordination.hang_timeout if plan.coordination is not None else None
        if link is not None and hang is not None:  # the hang watchdog's input: their growth
            self._direct.watch(link.activity, hang)
        self._stacks: StackDumps | None = None  # the hang watchdog's py-spy dumps, off the loop
        self._rounds = NodeRounds(st, self._start)

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        st = self.state
        st.subreaper = become_subreaper()
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()  # the console writes to fd 1 directly, after anything buffered
        try:
            with SignalPipe() as sigs:
                self._sel.register(sigs.fileno(), selectors.EVENT_READ, None)
                early = early_signals.first()  # one that came before this pipe listened
                st.signals_mark = early_signals.count()
                st.job.started = time.time()
                if early is not None:
                    node_stop.on_signals(st, [early])  # nothing starts; the job hears of it
                if st.link is not None:
                    # Nothing starts before every node of the job has arrived (node 0 says).
                    self._sel.register(st.link.fileno(), selectors.EVENT_READ, "job")
                elif st.phase in LIVE:
                    self._start_all()
                while not self._finished():
                    for key, _ in self._sel.select(self._timeout()):
                        if key.data is None:
                            node_stop.on_signals(st, sigs.drain())
                        elif key.data == "job":
                            self._on_job(st.link.poll() if st.link else [])
                    self._reap()
                    self._restart_due()
                    self._advance()
                    node_report.report_log_errors(st)
                self._drain_outputs()  # with the signals still caught
        finally:
            # Whatever happened above (even a bug), no process marun started outlives it.
            if st.running:
                node_stop.signal_everything(st, signal.SIGKILL)
            drained = self._drain_outputs()
            st.log_early_events()
            node_report.report_log_errors(st)
            self._sel.close()
            if self._stacks is not None:
                self._stacks.close()
            self._direct.close()
            if drained:  # else a pump still holds them, and marun is about to exit
                for fd in st.log_fds:
                    os.close(fd)
        return node_report.finish(st)

    def _start_all(self) -> None:
        st = self.state
        st.job.started = time.time()
        self._rounds.start_round(0, {})
        st.log_early_events()

    def _on_job(self, events: list[JobEvent]) -> None:
        st = self.state
        for event in events:
            if event.kind == "start" and st.phase is Phase.ARRIVING:
                if event.code == 0 and not st.job.rounds:
                    st.emit("job_started")
                    self._start_all()
                else:  # a restart round's (marun.runtime.node_rounds)
                    self._rounds.start_round(event.code, dict(event.ports))
                    st.log_early_events()
            elif event.kind == "restart":
                self._rounds.on_restart(event.code, event.failure)
            elif event.kind == "dump" and st.phase is Phase.RUNNING:
                # code 1: the watchdog's sample (to compare with another): not written to logs
                self._request_stacks(sample=event.code == 1)
            elif event.kind == "stop" and st.job_stop is None:
                # Kept even when this node is already stopping: the job's first failure is
                # printed at the end whichever node it was on.
                st.job_stop = event
                if st.phase not in LIVE:
                    continue
                st.pending.clear()
                st.job.exit_code = event.code
                st.job.outcome = "failed" if event.code else "succeeded"
                reason = "job done" if not event.code else "job stopped by node 0"
                st.emit("job_stop", "error" if event.code else "info", code=event.code)
                node_stop.begin_stop(st, reason, signal.SIGTERM)

    def _request_stacks(self, sample: bool) -> None:
        """py-spy takes seconds a process: the dumps run in marun.runtime.stacks' own thread,
        and the loop goes on. It gets what to dump, with its own descriptor of each log."""
        from marun.runtime.stacks import StackDumps, Target

        st = self.state
        if st.link is None:
            return
        if self._stacks is None:
            self._stacks = StackDumps(st.link.report_stacks)
        targets = []
        for pid, (rec, _) in sorted(st.running.items()):
            if rec.spec.daemon:
                continue
            fd = None if sample else os.dup(st.log_fds[st.records.index(rec)])
            targets.append(Target(pid, rec.spec.name, rec.spec.rank, fd))
        self._stacks.request(targets)

    def _advance(self) -> None:
        if self.state.phase is Phase.RESTARTING:
            self._rounds.advance()
        else:
            node_stop.advance(self.state)

    def _finished(self) -> bool:
        st = self.state
        return st.phase not in LIVE and (not st.children_left or st.phase is Phase.GAVE_UP)

    def _timeout(self) -> float:
        st = self.state
        now = time.monotonic()
        due = [t - now for t in st.pending.values()]
        if st.phase in (Phase.STOPPING, Phase.KILLING, Phase.RESTARTING):
            due.append(st.deadline - now)
        elif st.others_due is not None:
            due.append(st.others_due - now)
        return max(0.0, min([TICK, *due]))

    # -- starting ---------------------------------------------------------------------------

    def _start(self, index: int) -> bool:
        st = self.state
        rec = st.records[index]
        spec = rec.spec
        shown = self._console_selection.shows(spec.name, spec.role, spec.rank)
        # Not shown: its log is its stdout and stderr, marun not in between (direct_log.py).
        read_fd, write_fd = os.pipe() if shown else (-1, self._direct.begin(index))
        if shown:
            widen_pipe(read_fd)
        now = time.time()
        try:
            popen = spawn(self._rounds.spec_of_round(spec), write_fd)
        except OSError as exc:
            if shown:
                os.close(read_fd)
            rec.error = f"cannot start {spec.argv[0]!r}: {exc.strerror}"
            code = cannot_start_exit(exc.errno)
            rec.started = rec.started or now
            rec.ended = now
            rec.ending = Ending(code)
            st.emit("process_failed_to_start", "error", process=spec.name, error=rec.error)
            self._fail(rec)
            return False
        finally:
            if shown:
                os.close(write_fd)
        st.running[popen.pid] = (rec, popen)
        st.groups.add(popen.pid)
        if not spec.daemon:
            self._rounds.groups.add(popen.pid)
        if shown:
            prefix = f"[{st.node.index}:{rec.label}] ".encode() if st.options.prefix_output else b""
            stream = OutputStream(
                st.log_fds[index],
                self._console,
                prefix,
                rec.tail,
                on_log_error=functools.partial(node_report.on_log_error, st, spec.name, spec.log),
            )
            on_data = st.link.activity if st.link is not None else None
            self._pumps[index] = self._relay.start(read_fd, stream, on_data)
        rec.pids.append(popen.pid)
        rec.started = rec.started or now
        rec.ended = None
        rec.ending = None
        rec.stopped_by = None
        st.emit(
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
        st = self.state
        if self._relay.closing:
            return self._relay.closed  # drained already (or tried to)
        if self._relay.close(DRAIN_WAIT):
            return True
        st.emit("output_not_drained", "warning", stuck_seconds=DRAIN_WAIT)
        return False

    # -- endings ----------------------------------------------------------------------------

    def _reap(self) -> None:
        st = self.state
        ended, st.children_left = reap()
        now = time.time()
        for pid, ending in ended:
            entry = st.running.pop(pid, None)
            if entry is None:
                st.job.orphans_reaped += 1
                continue
            rec, popen = entry
            popen.returncode = ending.code if ending.signal is None else -ending.signal
            rec.ending = ending
            rec.ended = now
            st.emit(
                "process_exited",
                process=rec.spec.name,
                rank=rec.spec.rank,
                pid=pid,
                exit_code=ending.code,
                signal=None if ending.signal is None else signal_name(ending.signal),
            )
            if st.phase is Phase.RUNNING and ending.code != 0:
                self._on_failure(rec)
        if not st.subreaper and not st.running:
            # Without adoption, orphans are not ours to wait for: the planned ones are all.
            st.children_left = False

    def _on_failure(self, rec: ProcessRecord) -> None:
        st = self.state
        if rec.spec.restart_on_failure and rec.restarts < st.options.recovery_restarts:
            index = st.records.index(rec)
            st.pending[index] = time.monotonic() + st.options.recovery_wait
            st.emit(
                "process_restart_scheduled",
                "warning",  # it died: a person should see it without --verbose
                process=rec.spec.name,
                rank=rec.spec.rank,
                restart=rec.restarts + 1,
                recovery_restarts=st.options.recovery_restarts,
                in_seconds=st.options.recovery_wait,
            )
            return
        self._fail(rec)

    def _fail(self, rec: ProcessRecord) -> None:
        st = self.state
        if st.phase not in LIVE or st.job.first_failure is not None:
            return
        assert rec.ending is not None
        lines = self._direct.read_tail(st.records.index(rec))  # None: its pump keeps them
        if lines is not None:
            rec.tail.clear()
            rec.tail.extend(lines)
        st.job.first_failure = rec
        st.job.outcome = "failed"
        st.job.exit_code = rec.ending.code
        st.emit(
            "job_failed",
            "error",
            process=rec.spec.name,
            rank=rec.spec.rank,
            status=describe(rec.ending),
        )
        if self._rounds.failure_to_round(rec):
            pass  # a restart round (marun.runtime.node_rounds), or node 0's stop
        elif st.options.fail_fast:
            node_stop.begin_stop(st, "failure", signal.SIGTERM)
        else:
            st.others_due = time.monotonic() + st.options.grace_period + OTHERS_MARGIN
        if st.link is not None:
            # The last lines it wrote may still be in its pipe: its pump takes them in first
            # (the end of the pipe comes at once unless something it started holds it open).
            pump = self._pumps.get(st.records.index(rec))
            if pump is not None:
                pump.done.wait(TAIL_WAIT)
            st.link.report_failure(
                process_end(rec).but(log=rec.spec.log, tail=tuple(rec.tail)[-20:]),
                self._rounds.uptime(),
            )

    def _restart_due(self) -> None:
        st = self.state
        now = time.monotonic()
        for index, due in sorted(st.pending.items()):
            if due <= now and st.phase is Phase.RUNNING:
                del st.pending[index]
                rec = st.records[index]
                st.emit(
                    "process_restarting",
                    process=rec.spec.name,
                    rank=rec.spec.rank,
                    restart=rec.restarts + 1,
                    recovery_restarts=st.options.recovery_restarts,
                )
                rec.tail.clear()
                end_the_line(st.log_fds[index])
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
