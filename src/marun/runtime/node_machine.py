"""One node's supervision as a pure machine (`NodeMachine`): what its processes' ends, the
signals to its marun, node 0's word and the passing of time mean for the node (start, fail fast,
restart one process, restart rounds and their stop barrier, the stop, SIGKILL, the end). It is
fed events with the time (`now`, monotonic) and returns actions (marun.runtime.node_actions)
for its shell, marun.runtime.supervisor, which alone forks, signals, reaps, moves output and
talks to the job's link. No sockets, threads, clocks or processes here: the records it reads
and writes (marun.runtime.result) are data, filled in by the shell as processes start and end.
Phases move only through SUPERVISOR_MOVES (`_move`). The job decides what a failure or a stop
signal comes to (a restart round, the job's stop) and when its rounds start: node 0's job machine
(marun.job.machine), over the wire or, for a job of one node, in this process
(marun.job.local_job); this machine hears it as `JobEvent`s and reports to it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from marun.exit_codes import signal_exit
from marun.plan.launch_plan import ProcessSpec, Supervision, round_spec
from marun.plan.place_hosts import with_place_hosts
from marun.runtime.failure import Failure
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
    TakeTail,
)
from marun.runtime.phase import KILL_WAIT, LIVE, OTHERS_MARGIN, SUPERVISOR_MOVES, TICK, Phase
from marun.runtime.result import JobRecord, NodeRound, ProcessRecord, describe
from marun.runtime.round_rule import describe_cause, round_line
from marun.runtime.signals import RELAYED, SIGKILL, SIGTERM, STOP, signal_name

if TYPE_CHECKING:
    from marun.runtime.joblink import JobEvent


class NodeMachine:
    """The node `job` (its records, outcome and rounds) under `options`."""

    def __init__(self, job: JobRecord, options: Supervision, now: float) -> None:
        self.job = job
        self.records = job.processes
        self.options = options
        # Nothing starts before the job says `start` (a job of one node says it at once).
        self.phase = Phase.ARRIVING
        self.deadline = 0.0
        self.running: set[int] = set()  # the records whose process runs now
        self.pending: dict[int, float] = {}  # record index -> when its restart is due
        self.others_due: float | None = None  # fail_fast off: when to stop the others anyway
        self.stop_sig = SIGTERM
        self.children_left = True  # (the shell's reap says)
        self.last_scan = 0.0
        self.daemons_only = all(rec.spec.daemon for rec in self.records)
        self.job_stop: JobEvent | None = None  # node 0's stop, kept for the end's summary
        # restart rounds (the job's rule decides them: marun.runtime.round_rule.RoundRule)
        self.round = 0
        self.target: int | None = None  # RESTARTING: the round stopped for (None: not said)
        self.cause: Failure | None = None
        self.began = now  # when this round's processes were started
        self.killed = False
        self.ports: dict[str, str] = {}
        self.place_hosts: tuple[tuple[int, str], ...] = ()  # hot spares (JobEvent.hosts)
        self._out: list[NodeAction] = []

    # -- events -------------------------------------------------------------------------------

    def begin(self, now: float, wall: float, early: int | None) -> list[NodeAction]:
        """The supervision begins (`early`: a stop signal that came before it listened)."""
        if early is not None:
            self._signals([early], now)
        return self._taken()

    def signals(self, numbers: list[int], now: float) -> list[NodeAction]:
        self._signals(numbers, now)  # (a stop signal: the one stop, and the job hears of it)
        return self._taken()

    def heard(self, events: list[JobEvent], now: float, wall: float) -> list[NodeAction]:
        """Node 0's word (marun.runtime.joblink.JobEvent)."""
        for event in events:
            if event.kind == "start" and self.phase is Phase.ARRIVING:
                if event.code == 0 and not self.job.rounds:
                    self._emit("job_started")
                self.place_hosts = event.hosts
                self._start_round(event.code, dict(event.ports), now, wall)
            elif event.kind == "restart":
                self._on_restart(event.code, event.failure, now)
            elif event.kind == "dump" and self.phase is Phase.RUNNING:
                # code 1: the watchdog's sample (to compare with another): not written to logs
                self._out.append(RequestStacks(sample=event.code == 1))
            elif event.kind == "stop" and self.job_stop is None:
                # printed at the end whichever node it was on.
                self.job_stop = event
                if self.phase not in LIVE:
                    continue
                self.pending.clear()
                self.job.exit_code = event.code
                self.job.outcome = "failed" if event.code else "succeeded"
                reason = "job done" if not event.code else "job stopped by node 0"
                self._emit("job_stop", "error" if event.code else "info", code=event.code)
                self._begin_stop(reason, SIGTERM, now)
        return self._taken()

    def started(self, index: int) -> None:
        self.running.add(index)  # (the shell started record `index`'s process)

    def exited(self, index: int, now: float) -> list[NodeAction]:
        """Record `index`'s process ended (its `ending` is set)."""
        self.running.discard(index)
        rec = self.records[index]
        assert rec.ending is not None
        if self.phase is Phase.RUNNING and rec.ending.code != 0:
            self._on_failure(index, now)
        return self._taken()

    def start_failed(self, index: int, now: float) -> list[NodeAction]:
        """Record `index` could not be started (its `ending` says with what code)."""
        self.running.discard(index)
        self._fail(index, now)
        return self._taken()

    def round_started(self, started: int, now: float) -> list[NodeAction]:
        """Every record of a StartRound started (`started`: the non-daemon ones)."""
        if self.round:
            # The console's "all N ranks": processes with a rank (not MindSpore's scheduler);
            # a node whose processes have none (MPI's mpirun) counts its processes.
            ranked = sum(1 for r in self.records if r.spec.rank is not None and not r.spec.daemon)
            started = ranked or started
            self._out += [Activity(), ReportRunning(self.round, started)]
            self._emit("round_running", round=self.round, processes=started)
        return self._taken()

    def tick(
        self, now: float, children_left: bool, round_left: tuple[int, ...] = ()
    ) -> list[NodeAction]:
        """Time passes (`children_left`: the last reap's; `round_left`: RESTARTING's processes)."""
        self.children_left = children_left
        self._restart_due(now)
        if self.phase is Phase.RESTARTING:
            self._advance_round(now, round_left)
        else:
            self._advance(now)
        return self._taken()

    # -- what the shell asks ------------------------------------------------------------------

    def finished(self) -> bool:
        return self.phase not in LIVE and (not self.children_left or self.phase is Phase.GAVE_UP)

    def timeout(self, now: float) -> float:
        """How long the shell may wait for something to happen before the next tick."""
        due = [t - now for t in self.pending.values()]
        if self.phase in (Phase.STOPPING, Phase.KILLING, Phase.RESTARTING):
            due.append(self.deadline - now)
        elif self.others_due is not None:
            due.append(self.others_due - now)
        return max(0.0, min([TICK, *due]))

    def spec_of_round(self, spec: ProcessSpec) -> ProcessSpec:
        """The process as this round starts it."""
        spec = round_spec(spec, self.round, self.options.max_restarts, self.ports)
        return with_place_hosts(spec, self.place_hosts)

    # -- the rules ----------------------------------------------------------------------------

    def _signals(self, numbers: list[int], now: float) -> None:
        for signum in numbers:
            if signum not in RELAYED:
                continue  # SIGCHLD: every wake-up reaps anyway
            self._emit(
                "signal_received", "warning", signal=signal_name(signum), phase=self.phase.value
            )
            if signum in STOP and self.phase in LIVE:
                self.pending.clear()
                # 128+N here; the job's code is the job's (a job of parameter servers alone, or
                # sshd alone, ends with 0 on it: marun.job.machine).
                self.job.outcome = "interrupted"
                self.job.exit_code = signal_exit(signum)
                self.job.signal = signum
                before_start = self.phase is Phase.ARRIVING
                self._begin_stop(f"received {signal_name(signum)}", signum, now)
                # The job's failure: it stops every node with 128+N.
                name = signal_name(signum)
                why = f"node {self.job.node} ({self.job.host}) stopped by {name}"
                failure = Failure(
                    exit_code=signal_exit(signum),
                    signal=name,
                    stop_signal=name,
                    why=why + (" before the start" if before_start else ""),
                )
                self._out.append(ReportFailure(failure))
            elif signum in STOP:
                self._out.append(SignalAll(signum))
            else:
                self._out.append(PassOn(signum))

    def _begin_stop(self, reason: str, signum: int, now: float) -> None:
        """The one stop: STOPPING, `signum` to everything, grace_period (once; not after it)."""
        if self.phase not in LIVE:
            return
        self._move(Phase.STOPPING)
        self.stop_sig = signum
        self.pending.clear()
        self.deadline = now + self.options.grace_period
        if self.running or self.children_left:
            self._emit(
                "stopping",
                reason=reason,
                signal=signal_name(signum),
                grace_seconds=self.options.grace_period,
                running=len(self.running),
            )
        self._out.append(SignalAll(signum))

    def _advance(self, now: float) -> None:
        """Not RESTARTING: the end of the work, then grace_period, SIGKILL, giving up."""
        if self.phase is Phase.RUNNING and self._stop_the_others(now):
            return
        if self.phase is Phase.RUNNING:
            busy = self.pending.keys() | self.running  # (a restart due, or being started)
            waiting = [i for i, r in enumerate(self.records) if r.ending is None or i in busy]
            workers = [r for r in self.records if not r.spec.daemon]
            if workers and all(r.ending is not None and r.ending.code == 0 for r in workers):
                self._begin_stop("done", SIGTERM, now)
            elif not waiting:
                # Daemons only, and all of them have ended on their own (with 0: a non-zero end
                # is a failure).
                self._begin_stop("done", SIGTERM, now)
            return
        if self.phase is Phase.STOPPING and now >= self.deadline:
            self._move(Phase.KILLING)
            self.deadline = now + KILL_WAIT
            self._emit("killing", "warning", after_grace_seconds=self.options.grace_period)
            self._out.append(SignalAll(SIGKILL))
        elif self.phase is Phase.KILLING and now >= self.deadline:
            self._move(Phase.GAVE_UP)
            self._out.append(ReportLeft())
        elif self.children_left and now - self.last_scan >= TICK:
            # Orphans adopted while stopping get the same signal as everyone before them.
            self.last_scan = now
            self._out.append(
                SignalOrphans(SIGKILL if self.phase is Phase.KILLING else self.stop_sig)
            )

    def _stop_the_others(self, now: float) -> bool:
        """fail_fast off: once the others have had their window after the first failure, stop
        them here (True when that began)."""
        if self.others_due is None or now < self.others_due:
            return False
        window = self.options.grace_period + OTHERS_MARGIN
        self._emit("others_stopped_after_failure", "warning", after_seconds=window)
        self._begin_stop(f"still running {window:g}s after the first failure", SIGTERM, now)
        return True

    def _restart_due(self, now: float) -> None:
        for index, due in sorted(self.pending.items()):
            if due <= now and self.phase is Phase.RUNNING:
                del self.pending[index]
                rec = self.records[index]
                self._emit(
                    "process_restarting",
                    process=rec.spec.name,
                    rank=rec.spec.rank,
                    restart=rec.restarts + 1,
                    recovery_restarts=self.options.recovery_restarts,
                )
                self.running.add(index)  # (being started: not a process that has ended)
                self._out.append(Restart(index))

    def _on_failure(self, index: int, now: float) -> None:
        rec = self.records[index]
        options = self.options
        if rec.spec.restart_on_failure and rec.restarts < options.recovery_restarts:
            self.pending[index] = now + options.recovery_wait
            self._emit(
                "process_restart_scheduled",
                "warning",  # it died: a person should see it without --verbose
                process=rec.spec.name,
                rank=rec.spec.rank,
                restart=rec.restarts + 1,
                recovery_restarts=options.recovery_restarts,
                in_seconds=options.recovery_wait,
            )
            return
        self._fail(index, now)

    def _fail(self, index: int, now: float) -> None:
        """The node's first failure: a restart round, fail fast, or (fail_fast off) a window
        for the others; node 0 hears of it."""
        rec = self.records[index]
        if self.phase not in LIVE or self.job.first_failure is not None:
            return
        assert rec.ending is not None
        self._out.append(TakeTail(index))
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
        if self._failure_to_round(rec, now):
            pass  # a restart round, or node 0's stop
        elif self.options.fail_fast:
            self._begin_stop("failure", SIGTERM, now)
        else:
            self.others_due = now + self.options.grace_period + OTHERS_MARGIN
        self._out.append(ReportFailure(rec.end_failure(), index, now - self.began))

    # -- restart rounds (docs/supervision.md, "Restart rounds") -------------------------------

    def _failure_to_round(self, rec: ProcessRecord, now: float) -> bool:
        """With rounds on, a process's failure (already recorded as this round's first) goes to
        the job, which decides (a round, or its stop); this node stops its own ranks meanwhile,
        as either answer needs."""
        if not self.options.max_restarts:
            return False
        cause = rec.end_failure().but(node=self.job.node, host=self.job.host)
        self._begin_round_stop(None, cause, now)
        return True

    def _begin_round_stop(self, target: int | None, cause: Failure | None, now: float) -> None:
        if self.phase is not Phase.RESTARTING:
            self.killed = False
            self.deadline = now + self.options.grace_period
            self._move(Phase.RESTARTING)
            self.pending.clear()
            self._emit(
                "round_stopping",  # info: node 0's one line per round is what a person reads
                round=target,
                cause=describe_cause(cause),
                grace_seconds=self.options.grace_period,
            )
            self._out.append(SignalRound(SIGTERM))
        if target is not None:
            self.target = target
        if cause is not None:
            self.cause = cause

    def _on_restart(self, round_: int, cause: Failure | None, now: float) -> None:
        """Node 0's `restart`: round `round_` begins (this node stops its ranks, or has)."""
        if round_ <= self.round:
            return
        if self.phase is Phase.RUNNING or self.phase is Phase.RESTARTING:
            self._begin_round_stop(round_, cause, now)
        elif self.phase is Phase.ARRIVING:
            # Nothing of ours runs (a new marun that joins the round, or one already stopped).
            self.target, self.cause = round_, cause
            self._out.append(ReportStopped(round_))

    def _advance_round(self, now: float, left: tuple[int, ...]) -> None:
        """RESTARTING: SIGKILL after grace_period; once every process of the round is gone, the
        barrier (the job's `stopped`)."""
        if not left:
            if self.target is None:
                return  # the job has not said which round (or stop) yet
            self._move(Phase.ARRIVING)
            self._emit("round_stopped", round=self.target)
            self._out.append(ReportStopped(self.target))
            return
        if now < self.deadline:
            return
        if not self.killed:
            self.killed = True
            self.deadline = now + KILL_WAIT
            self._emit("killing", "warning", after_grace_seconds=self.options.grace_period)
            self._out.append(SignalRound(SIGKILL))
            return
        # Outlived SIGKILL (stuck in the kernel): no round can start beside them.
        self._emit("processes_left_after_sigkill", "error", pids=sorted(left))
        self.job.outcome = "failed"
        self.job.exit_code = self.job.exit_code or 1
        self._begin_stop("processes of the round outlived SIGKILL", SIGKILL, now)

    def _start_round(self, round_: int, ports: dict[str, str], now: float, wall: float) -> None:
        """Round `round_`'s processes: every one not running (daemons that live on stay), each
        log marked with the round and its cause."""
        if round_ > self.round:
            self.round = round_
            self.ports = {k: v for k, v in ports.items() if k in self.options.round_ports}
            self.job.rounds.append(NodeRound(round_, self.cause, wall))
            self.job.first_failure = None
            self.job.outcome = "succeeded"
            self.job.exit_code = 0
        self._move(Phase.RUNNING)
        self.target = None
        self.began = now
        line = round_line(self.round, self.options.max_restarts, self.cause) if self.round else None
        indexes = tuple(i for i in range(len(self.records)) if i not in self.running)
        self._out.append(StartRound(indexes, line))

    # -- its voice and its moves ----------------------------------------------------------------

    def _move(self, phase: Phase) -> None:
        """The one place the phase changes, checked against runtime.phase.SUPERVISOR_MOVES."""
        self.phase = SUPERVISOR_MOVES.move(self.phase, phase, self._emit)

    def _emit(self, event: str, level: str = "info", **fields: Any) -> None:
        self._out.append(Emit(event, level, fields))

    def _taken(self) -> list[NodeAction]:
        out, self._out = self._out, []
        return out
