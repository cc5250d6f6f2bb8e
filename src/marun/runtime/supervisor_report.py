"""The supervisor's end and its voice: result.json, the job's end with the rest of the nodes,
the failure summary, and marun's events (structlog, held back until every process started).
A base of `Supervisor` (marun.runtime.supervisor), which sets every attribute declared here."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import deque
from typing import TYPE_CHECKING

from marun._files import private_dir
from marun.exit_codes import signal_exit
from marun.plan.launch_plan import NodePlan, Supervision
from marun.runtime.result import (
    JobRecord,
    ProcessRecord,
    failure_summary,
    job_failure_summary,
    nested_summary,
    outcome_of,
    write_result,
)
from marun.runtime.signals import Interrupted, interruptible, signal_name

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

    from marun.runtime.joblink import JobEvent, JobLink


class SupervisorReport:
    job: JobRecord
    _options: Supervision
    _node: NodePlan
    _records: list[ProcessRecord]
    _link: JobLink | None
    _job_stop: JobEvent | None
    _tail_on: int | None
    _log: FilteringBoundLogger | None
    _early: list[tuple[str, str, dict[str, object], float]] | None
    _log_errors: deque[tuple[str, str, OSError]]

    def _finish(self) -> int:
        job = self.job
        job.ended = time.time()
        # Written now, with this node's own end: a node killed while it waits for the job's end
        # below still leaves its record.
        path = self._write_result()
        if job.first_failure is not None and self._link is None:
            # A coordinated node prints the job's summary instead, once the job has ended.
            self._say(failure_summary(job) if self._options.prefix_output else nested_summary(job))
        code = job.exit_code
        if self._link is not None:
            code = self._end_of_job()
            if code != job.exit_code:
                # marun exits with the job's code (node 0's word, or a signal while it waited):
                # result.json says the code marun exits with.
                job.exit_code = code
                job.outcome = outcome_of(code, job.signal)
                path = self._write_result()
        self._emit(
            "job_finished",
            outcome=job.outcome,
            exit_code=code,
            orphans_reaped=job.orphans_reaped,
            result=path,
        )
        return code

    def _end_of_job(self) -> int:
        """Tell node 0 how this node ended, wait for the job's end, print its first failure."""
        assert self._link is not None
        try:
            with interruptible():
                code = self._link.report_end(self.job.outcome, self.job.exit_code)
        except Interrupted as exc:
            # Stopped while waiting for the rest of the job (the platform ends the pod).
            self._emit("signal_received", "warning", signal=signal_name(exc.signum), phase="end")
            code = self.job.exit_code
            if not code:  # this node's own end was clean: the signal is what ends it now
                code = signal_exit(exc.signum)
                self.job.signal = exc.signum
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

    def _write_result(self) -> str | None:
        """result.json (atomically): its path, or None when it could not be written."""
        directory = self._record_dir()
        try:
            return write_result(directory, self.job)
        except OSError as exc:
            self._emit("result_not_written", "warning", directory=directory, error=exc.strerror)
            return None

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

    def _on_log_error(self, name: str, log: str, exc: OSError) -> None:
        """From a pump thread: the main loop says it (the log and its early list are its own)."""
        self._log_errors.append((name, log, exc))

    def _report_log_errors(self) -> None:
        while self._log_errors:
            name, log, exc = self._log_errors.popleft()
            self._log_not_written(name, log, exc)
