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
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from marun.errors import bad_value
from marun.exit_codes import cannot_start_exit
from marun.plan.launch_plan import LaunchPlan, NodePlan
from marun.runtime import early_signals, node_report, node_stop
from marun.runtime.direct_log import DirectLogs
from marun.runtime.node_actions import (
    Activity,
    Emit,
    NodeAction,
    PassOn,
    ReportFailure,
    ReportLeft,
    ReportRunning,
    ReportStopped,
    RequestStacks,
    Restart,
    SignalAll,
    SignalOrphans,
    SignalRound,
    StartRound,
    StartWarmSpares,
    TakeTail,
    after_round_started,
)
from marun.runtime.node_state import NodeState
from marun.runtime.node_stop import DRAIN_WAIT, TAIL_WAIT
from marun.runtime.output import (
    Console,
    OutputStream,
    Pump,
    Relay,
    end_the_line,
    open_log,
    widen_pipe,
)
from marun.runtime.phase import Phase
from marun.runtime.reaper import (
    Ending,
    become_subreaper,
    direct_children,
    reap,
)
from marun.runtime.result import ProcessRecord
from marun.runtime.signals import (
    SIGKILL,
    SignalPipe,
    signal_name,
)
from marun.runtime.spawn import spawn

if TYPE_CHECKING:
    from marun.runtime.joblink import JobLink
    from marun.runtime.stacks import StackDumps
    from marun.runtime.warm_spare import Spares


class Supervisor:
    """Runs `node` (one of `plan`'s nodes) under `plan.supervision` to the end: `run()` returns
    marun's exit code. `console` is marun's stdout unless given. The shell of the node's machine
    (marun.runtime.node_machine, in the state marun.runtime.node_state holds): it feeds the
    machine what happens (a process's end, a signal, node 0's word, the time) and carries out
    what the machine returns (start, signal, report, say); it owns the loop, the processes'
    start and their output. Sending signals is marun.runtime.node_stop's, the end and its
    record marun.runtime.node_report's."""

    def __init__(
        self,
        plan: LaunchPlan,
        node: NodePlan,
        link: JobLink,
        console: Console | None = None,
        shared_console: bool = False,
    ) -> None:
        st = self.state = NodeState(plan, node, link, shared_console)
        self.job = st.job
        self.machine = st.machine
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
        if hang is not None:  # the hang watchdog's input: their growth
            self._direct.watch(link.activity, hang)
        self._stacks: StackDumps | None = None  # the hang watchdog's py-spy dumps, off the loop
        self._spares: Spares | None = None  # preload's spare interpreters (warm_spare.py)

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        st = self.state
        machine = self.machine
        st.subreaper = become_subreaper()
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()  # the console writes to fd 1 directly, after anything buffered
        try:
            with SignalPipe() as sigs:
                self._sel.register(sigs.fileno(), selectors.EVENT_READ, None)
                early = early_signals.first()  # one that came before this pipe listened
                st.signals_mark = early_signals.count()
                st.job.started = time.time()
                # Nothing starts before every node of the job has arrived (the job says).
                self._sel.register(st.link.fileno(), selectors.EVENT_READ, "job")
                # (an early stop signal: nothing starts; the job hears of it)
                self._carry_out(machine.begin(time.monotonic(), time.time(), early))
                while not machine.finished():
                    for key, _ in self._sel.select(machine.timeout(time.monotonic())):
                        if key.data is None:
                            self._carry_out(machine.signals(sigs.drain(), time.monotonic()))
                        elif key.data == "job":
                            events = st.link.poll()
                            self._carry_out(machine.heard(events, time.monotonic(), time.time()))
                        elif key.data == "spare" and self._spares is not None:
                            self._spares.heard(key.fileobj)  # type: ignore[arg-type]
                    self._reap()
                    left = node_stop.round_left(st) if machine.phase is Phase.RESTARTING else ()
                    self._carry_out(machine.tick(time.monotonic(), st.children_left, left))
                    node_report.report_log_errors(st)
                self._drain_outputs()  # with the signals still caught
        finally:
            # Whatever happened above (even a bug), no process marun started outlives it.
            if self._spares is not None:
                self._spares.drop_all()
            if st.running:
                node_stop.signal_everything(st, SIGKILL)
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

    def _carry_out(self, actions: list[NodeAction]) -> None:
        """What the machine asked, in order (what that brings back from it, after)."""
        st = self.state
        todo = list(actions)
        while todo:
            action = todo.pop(0)
            more: list[NodeAction] = []
            if isinstance(action, Emit):
                st.emit(action.event, action.level, **action.fields)
            elif isinstance(action, StartRound):
                more = self._start_round(action)
            elif isinstance(action, Restart):
                rec = st.records[action.index]
                rec.tail.clear()
                end_the_line(st.log_fds[action.index])
                more = self._start(action.index) or []
            elif isinstance(action, StartWarmSpares):
                self._start_spares()
            elif isinstance(action, SignalAll):
                if self._spares is not None:  # the node stops: spares first, all of them
                    self._spares.drop_all()
                node_stop.signal_everything(st, action.signum)
            elif isinstance(action, SignalRound):
                node_stop.signal_round(st, action.signum)
            elif isinstance(action, SignalOrphans):
                node_stop.signal_orphans(st, action.signum)
            elif isinstance(action, PassOn):
                node_stop.pass_on(st, action.signum)
            elif isinstance(action, TakeTail):
                lines = self._direct.read_tail(action.index)  # None: its pump keeps them
                if lines is not None:
                    tail = st.records[action.index].tail
                    tail.clear()
                    tail.extend(lines)
            elif isinstance(action, ReportFailure):
                self._report_failure(action)
            elif isinstance(action, ReportStopped):
                st.link.report_stopped(action.round)
            elif isinstance(action, ReportRunning):
                st.link.report_running(action.round, action.ranks)
            elif isinstance(action, Activity):
                st.link.activity()  # the hang watchdog's silence counts from the round's start
            elif isinstance(action, RequestStacks):
                self._request_stacks(action.sample)
            elif isinstance(action, ReportLeft):
                left = [pid for pid, _ in direct_children()] or sorted(st.running)
                st.emit("processes_left_after_sigkill", "error", pids=left)
            todo[:0] = more

    def _start_round(self, action: StartRound) -> list[NodeAction]:
        """Each record of the round in order, its log marked first; the first that cannot
        start ends it (the machine heard why)."""
        st = self.state
        if self.machine.round == 0:
            st.job.started = time.time()
        started = 0
        more: list[NodeAction] | None = None
        for index in action.indexes:
            rec = st.records[index]
            if action.mark is not None:
                end_the_line(st.log_fds[index])
                with contextlib.suppress(OSError):
                    os.write(st.log_fds[index], f"{action.mark}\n".encode())
            rec.tail.clear()
            more = self._start(index, warm=True)
            if more is not None:
                break
            started += 0 if rec.spec.daemon else 1
        else:
            more = self.machine.round_started(started, time.monotonic())
            more += after_round_started(st.options, self.machine.round)
        # The round's processes are started: marun's own log can be imported now (it costs
        # more than starting them), and the link may settle.
        st.log_early_events()
        if self.machine.round == 0:
            st.link.settled()
        return more or []

    def _report_failure(self, action: ReportFailure) -> None:
        st = self.state
        failure = action.failure
        if action.index is not None:
            # The last lines it wrote may still be in its pipe: its pump takes them in first
            # (the end of the pipe comes at once unless something it started holds it open).
            pump = self._pumps.get(action.index)
            if pump is not None:
                pump.done.wait(TAIL_WAIT)
            rec = st.records[action.index]
            failure = failure.but(log=rec.spec.log, tail=tuple(rec.tail)[-20:])
        st.link.report_failure(failure, action.uptime)

    def _request_stacks(self, sample: bool) -> None:
        """py-spy takes seconds a process: the dumps run in marun.runtime.stacks' own thread,
        and the loop goes on. It gets what to dump, with its own descriptor of each log."""
        from marun.runtime.stacks import StackDumps, Target

        st = self.state
        if self._stacks is None:
            self._stacks = StackDumps(st.link.report_stacks)
        targets = []
        for pid, (rec, _) in sorted(st.running.items()):
            if rec.spec.daemon:
                continue
            fd = None if sample else os.dup(st.log_fds[st.records.index(rec)])
            targets.append(Target(pid, rec.spec.name, rec.spec.rank, fd))
        self._stacks.request(targets)

    # -- starting ---------------------------------------------------------------------------

    def _start_spares(self) -> None:
        """preload: a spare interpreter for each of the round's processes (marun.runtime
        .warm_spare), imported here only when preload is on."""
        st = self.state
        if self.machine.phase is not Phase.RUNNING:
            return  # the round's start is over already (a stop came): no spare to outlive it
        if self._spares is None:
            from marun.plan.launch_plan import ROUND_VARS
            from marun.runtime.warm_spare import Spares

            round_vars = frozenset((*ROUND_VARS, *st.options.round_ports))
            self._spares = Spares(st.options.preload, round_vars, st, self._sel)
        for index, rec in enumerate(st.records):
            if not rec.spec.daemon:
                self._spares.start(index, rec.spec)

    def _start(self, index: int, warm: bool = False) -> list[NodeAction] | None:
        """Start record `index` (`warm`: in its spare, if it has one ready); None, or (it could
        not start) what the machine says to that."""
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
            popen, promoted = self._spawn(index, warm, write_fd)
        except OSError as exc:
            if shown:
                os.close(read_fd)
            rec.error = f"cannot start {spec.argv[0]!r}: {exc.strerror}"
            code = cannot_start_exit(exc.errno)
            rec.started = rec.started or now
            rec.ended = now
            rec.ending = Ending(code)
            st.emit("process_failed_to_start", "error", process=spec.name, error=rec.error)
            return self.machine.start_failed(index, time.monotonic())
        finally:
            if shown:
                os.close(write_fd)
        st.running[popen.pid] = (rec, popen)
        st.groups.add(popen.pid)
        if not spec.daemon:
            st.round_groups.add(popen.pid)
        self.machine.started(index)
        if shown:
            prefix = f"[{st.node.index}:{rec.label}] ".encode() if st.options.prefix_output else b""
            stream = OutputStream(
                st.log_fds[index],
                self._console,
                prefix,
                rec.tail,
                on_log_error=functools.partial(node_report.on_log_error, st, spec.name, spec.log),
            )
            self._pumps[index] = self._relay.start(read_fd, stream, st.link.activity)
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
            **({"warm": "spare"} if promoted else {}),
        )
        return None

    def _spawn(self, index: int, warm: bool, out_fd: int) -> tuple[subprocess.Popen[bytes], bool]:
        """Record `index`'s process of this round (`warm`: in its spare where one is ready, one
        line where it has one that cannot be), and whether it was a spare."""
        spec = self.machine.spec_of_round(self.state.records[index].spec)
        if warm and self._spares is not None:
            popen = self._spares.take(index, spec, out_fd)  # (it says why where it cannot)
            if popen is not None:
                return popen, True
        return spawn(spec, out_fd), False

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
            if entry is None and self._spares is not None and self._spares.reaped(pid, ending):
                continue  # a spare interpreter: no process of the job
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
            self._carry_out(self.machine.exited(st.records.index(rec), time.monotonic()))
        if not st.subreaper and not st.running:
            # Without adoption, orphans are not ours to wait for: the planned ones are all.
            st.children_left = False


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
