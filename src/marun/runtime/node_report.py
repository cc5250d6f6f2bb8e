"""A node's end and its record: result.json, the job's end with the rest of the nodes, the
failure summary, and the log-write errors the output pumps hand the loop. Functions of the
node's state (marun.runtime.node_state), called by marun.runtime.supervisor."""

from __future__ import annotations

import time

from marun.exit_codes import signal_exit
from marun.runtime import early_signals
from marun.runtime.node_state import NodeState
from marun.runtime.result import (
    failure_summary,
    job_failure_summary,
    nested_summary,
    outcome_of,
    write_result,
)
from marun.runtime.signals import Interrupted, interruptible, signal_name


def finish(st: NodeState) -> int:
    """result.json, the summary, the job's end: marun's exit code."""
    job = st.job
    job.ended = time.time()
    # Written now, with this node's own end: a node killed while it waits for the job's end
    # below still leaves its record.
    path = write_result_file(st)
    code = _end_of_job(st)
    if code != job.exit_code:
        # marun exits with the job's code (node 0's word, or a signal while it waited):
        # result.json says the code marun exits with.
        job.exit_code = code
        job.outcome = outcome_of(code, job.signal)
        path = write_result_file(st)
    st.emit(
        "job_finished",
        outcome=job.outcome,
        exit_code=code,
        orphans_reaped=job.orphans_reaped,
        result=path,
    )
    return code


def _end_of_job(st: NodeState) -> int:
    """Tell the job how this node ended, wait for its end, print its first failure."""
    if st.alone:
        # The job is this node: its end is the node's, and so is the summary.
        code = st.link.report_end(st.job.outcome, st.job.exit_code)
        st.link.close()
        if st.job.first_failure is not None:
            st.say(failure_summary(st.job) if st.options.prefix_output else nested_summary(st.job))
        return code
    try:
        with interruptible():
            # A stop signal between the supervisor's loop and this wait was only recorded
            # (marun.runtime.early_signals' handler was back): acted on now, as if it came here.
            late = early_signals.since(st.signals_mark)
            if late is not None:
                raise Interrupted(late)
            code = st.link.report_end(st.job.outcome, st.job.exit_code)
    except Interrupted as exc:
        # Stopped while waiting for the rest of the job (the platform ends the pod).
        st.emit("signal_received", "warning", signal=signal_name(exc.signum), phase="end")
        code = st.job.exit_code
        if not code:  # this node's own end was clean: the signal is what ends it now
            code = signal_exit(exc.signum)
            st.job.signal = exc.signum
    stop = st.machine.job_stop
    for event in st.link.poll():
        if event.kind == "stop" and stop is None:
            stop = event
    st.link.close()
    if stop is not None and stop.code:
        st.say(job_failure_summary(st.job, stop.code, stop.failure, st.tail_on))
    elif st.job.first_failure is not None:
        st.say(failure_summary(st.job))
    return code


def write_result_file(st: NodeState) -> str | None:
    """result.json (atomically): its path, or None when it could not be written."""
    directory = st.record_dir()
    try:
        return write_result(directory, st.job)
    except OSError as exc:
        st.emit("result_not_written", "warning", directory=directory, error=exc.strerror)
        return None


def on_log_error(st: NodeState, name: str, log: str, exc: OSError) -> None:
    """From a pump thread: the main loop says it (the log and its early list are its own)."""
    st.log_errors.append((name, log, exc))


def report_log_errors(st: NodeState) -> None:
    while st.log_errors:
        name, log, exc = st.log_errors.popleft()
        st.emit(
            "log_not_written",
            "warning",
            process=name,
            log=log,
            error=exc.strerror,
            detail="the rest of this process's output reaches the console only",
        )
