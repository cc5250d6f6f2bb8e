"""What the supervisor leaves behind: `result.json` for tools and, when the job failed, a
summary for people that names the first failing process (torchrun's "Root Cause (first observed
failure)").

result.json (schema 1), written atomically, mode 0600:
    {"schema": 1, "mode", "node", "host",
     "outcome": "succeeded" | "failed" | "interrupted",
     "exit_code": the code marun exits with (on a node of a multi-node job: the job's, as
                  node 0 ended it; written again when the job's end changes it),
     "signal": the signal that interrupted the job (name) or null,
     "first_failure": {"name", "rank", "pid", "exit_code", "signal"} or null,
     "started", "ended": ISO 8601 local time with offset, "duration": seconds,
     "orphans_reaped": how many adopted orphans marun reaped,
     "processes": [{"name", "role", "rank", "daemon", "log",
                    "pids": one per start, "restarts",
                    "exit_code": the last run's code as a shell reports it (128+N for signal N),
                    "signal": name of the signal that ended the last run or null,
                    "stopped_by": the last signal marun sent while stopping it, or null,
                    "error": why it could not be started, or null,
                    "started", "ended", "duration": first start to last end}]}
A process never started has empty `pids` and null codes and times.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from marun.exit_codes import signal_exit
from marun.plan.launch_plan import ERROR_FILE_VAR, ProcessSpec
from marun.runtime.failure import Failure
from marun.runtime.reaper import Ending
from marun.runtime.signals import signal_name

SCHEMA_VERSION = 1


def iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec="milliseconds")


def describe(ending: Ending) -> str:
    if ending.signal is not None:
        return f"signal {ending.signal} ({signal_name(ending.signal)})"
    return f"exit code {ending.code}"


@dataclass(eq=False)
class ProcessRecord:
    """One planned process over its whole life, restarts included."""

    spec: ProcessSpec
    tail: deque[str]
    pids: list[int] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    ending: Ending | None = None
    stopped_by: int | None = None
    error: str | None = None

    @property
    def restarts(self) -> int:
        return max(0, len(self.pids) - 1)

    def end_failure(self) -> Failure:
        """Which process ended and how: what a round's cause and node 0's failure both say."""
        assert self.ending is not None
        signum = self.ending.signal
        return Failure(
            name=self.spec.name,
            rank=self.spec.rank,
            exit_code=self.ending.code,
            signal=None if signum is None else signal_name(signum),
        )

    @property
    def label(self) -> str:
        return self.spec.name if self.spec.rank is None else str(self.spec.rank)

    def to_dict(self) -> dict[str, Any]:
        spec = self.spec
        end = self.ending
        return {
            "name": spec.name,
            "role": spec.role,
            "rank": spec.rank,
            "daemon": spec.daemon,
            "log": spec.log,
            "pids": list(self.pids),
            "restarts": self.restarts,
            "exit_code": None if end is None else end.code,
            "signal": None if end is None or end.signal is None else signal_name(end.signal),
            "stopped_by": None if self.stopped_by is None else signal_name(self.stopped_by),
            "error": self.error,
            "started": iso(self.started),
            "ended": iso(self.ended),
            "duration": (
                None
                if self.started is None or self.ended is None
                else round(self.ended - self.started, 3)
            ),
        }


@dataclass(frozen=True)
class NodeRound:
    """A restart round this node went through: its number, its cause (None: node 0 named
    none) and when this node's processes of it were started (time.time())."""

    round: int
    cause: Failure | None
    started: float

    def to_dict(self) -> dict[str, Any]:
        cause = None if self.cause is None else self.cause.to_wire()
        return {"round": self.round, "cause": cause, "started": self.started}


@dataclass
class JobRecord:
    mode: str
    node: int
    host: str
    processes: list[ProcessRecord]
    started: float = field(default_factory=time.time)
    ended: float | None = None
    exit_code: int = 0
    outcome: str = "succeeded"
    signal: int | None = None
    first_failure: ProcessRecord | None = None
    orphans_reaped: int = 0
    # Restart rounds this node went through (docs/supervision.md)
    rounds: list[NodeRound] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        first = self.first_failure
        return {
            "schema": SCHEMA_VERSION,
            "mode": self.mode,
            "node": self.node,
            "host": self.host,
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "signal": None if self.signal is None else signal_name(self.signal),
            "first_failure": None
            if first is None
            else {
                "name": first.spec.name,
                "rank": first.spec.rank,
                "pid": first.pids[-1] if first.pids else None,
                "exit_code": None if first.ending is None else first.ending.code,
                "signal": None
                if first.ending is None or first.ending.signal is None
                else signal_name(first.ending.signal),
            },
            "started": iso(self.started),
            "ended": iso(self.ended),
            "duration": None if self.ended is None else round(self.ended - self.started, 3),
            "orphans_reaped": self.orphans_reaped,
            "round": len(self.rounds),
            "rounds": [r.to_dict() for r in self.rounds],
            "processes": [p.to_dict() for p in self.processes],
        }


def outcome_of(exit_code: int, signum: int | None) -> str:
    """The outcome that goes with marun's exit code: 128+N after stop signal N is an
    interruption, any other non-zero code a failure."""
    if exit_code == 0:
        return "succeeded"
    if signum is not None and exit_code == signal_exit(signum):
        return "interrupted"
    return "failed"


def write_result(directory: str, job: JobRecord) -> str:
    """Write this node's record into `directory` atomically (a reader never sees half a file)."""
    from marun._files import atomic_write, private_dir
    from marun.plan.launch_plan import result_file_name

    path = os.path.join(private_dir(directory, strict=False), result_file_name(job.node))
    atomic_write(path, json.dumps(job.to_dict(), indent=2) + "\n", 0o600)
    return path


RULE = "=" * 78


def _who(name: object, rank: object) -> str:
    """`rank1 (rank 1)`, or just `scheduler` for a process without a rank."""
    return f"{name}" if rank is None else f"{name} (rank {rank})"


def how_it_ended(proc: ProcessRecord) -> str:
    """One process's end in words that never contradict each other: whether marun stopped it,
    and what it then did."""
    end = proc.ending
    if end is None:
        return "not started" if not proc.pids else "still running"
    sent = proc.stopped_by
    if sent is None:
        return describe(end)
    if end.signal == sent:
        return f"stopped by marun ({signal_name(sent)})"
    if sent == 9:
        return f"{describe(end)}, then killed by marun (SIGKILL after the grace period)"
    return f"{describe(end)} after marun sent it {signal_name(sent)}"


def _first_failure_lines(head: str, log: str | None, tail: list[str], show_tail: bool) -> list[str]:
    lines = [head]
    if log:
        lines.append(f"  log: {log}")
    if not show_tail:
        return lines
    if tail:
        lines.append("  last lines of its output:")
        lines.extend(f"    | {line}" for line in tail)
    else:
        lines.append("  (it printed nothing)")
    return lines


# A rank's error file is one exception: read up to this much, show up to this many lines of it.
MAX_ERROR_FILE = 256 * 1024
MAX_TRACEBACK_LINES = 40


def error_file_lines(spec: ProcessSpec) -> list[str]:
    """What the process wrote to its TORCHELASTIC_ERROR_FILE (torch's `@record`: the exception's
    type and message, and its traceback), as summary lines; [] where it wrote none (the runtime
    removes the file of an earlier start before each start) or it is not torch's JSON."""
    path = spec.env.get(ERROR_FILE_VAR)
    if not path:
        return []
    try:
        with open(path, "rb") as stream:
            raw = stream.read(MAX_ERROR_FILE + 1)
        data = json.loads(raw.decode("utf-8", "replace")) if len(raw) <= MAX_ERROR_FILE else None
    except (OSError, ValueError):
        return []
    message = data.get("message") if isinstance(data, dict) else None
    stack: object = None
    if isinstance(message, dict):
        extra = message.get("extraInfo")
        stack = extra.get("py_callstack") if isinstance(extra, dict) else None
        message = message.get("message")
    if not isinstance(message, str):
        return []
    lines = [f"  its exception (from {path}, written by torch's @record):", f"    {message}"]
    if isinstance(stack, str) and stack.strip():
        frames = stack.rstrip().splitlines()
        lines.append("  traceback:")
        if len(frames) > MAX_TRACEBACK_LINES:
            lines.append(f"    | ... ({len(frames) - MAX_TRACEBACK_LINES} lines above)")
            frames = frames[-MAX_TRACEBACK_LINES:]
        lines.extend(f"    | {line}" for line in frames)
    return lines


def failure_summary(job: JobRecord) -> str:
    """The block printed on stderr when this node's job failed (a single-node job): the first
    failure once, with its last lines, then one line per other process."""
    first = job.first_failure
    assert first is not None and first.ending is not None
    pid = first.pids[-1] if first.pids else None
    head = (
        f"First failure: {_who(first.spec.name, first.spec.rank)}, {describe(first.ending)}"
        + ("" if pid is None else f" (pid {pid}")
        + ("" if pid is None or not first.restarts else f", after {first.restarts} restart(s)")
        + ("" if pid is None else ")")
    )
    lines = [
        RULE,
        f"marun: the job failed on node {job.node} ({job.host}), exit code {job.exit_code}",
    ]
    lines += _first_failure_lines(head, first.spec.log, list(first.tail), True)
    if first.error:
        lines.append(f"  error: {first.error}")
    lines += error_file_lines(first.spec)
    lines += _other_lines([p for p in job.processes if p is not first], "Other processes:")
    lines.append(RULE)
    return "\n".join(lines) + "\n"


def _other_lines(procs: list[ProcessRecord], title: str) -> list[str]:
    if not procs:
        return []
    return [title] + [f"  {_who(p.spec.name, p.spec.rank)}: {how_it_ended(p)}" for p in procs]


def job_failure_summary(
    job: JobRecord, code: int, failure: Failure | None, tail_on: int | None = None
) -> str:
    """The block a node of a multi-node job prints when the job stopped with a failure: the job's
    first failure (whichever node it was on) once, with its last lines unless `tail_on` names
    the node that prints them on the same console (marun simulate), then one line per process
    of this node."""
    show_tail = tail_on is None
    lines = [
        RULE,
        f"marun: the job stopped on every node, exit code {code} "
        f"(this is node {job.node}, {job.host})",
    ]
    failure = failure or Failure()
    if failure.why is not None:
        lines.append(f"Job's first failure: {failure.why}")
    else:
        status = f"signal {failure.signal}" if failure.signal else f"exit code {failure.exit_code}"
        head = (
            f"Job's first failure: node {failure.node} ({failure.host or '?'}), "
            f"process {_who(failure.name, failure.rank)}, {status}"
        )
        if not show_tail:
            head += f" (its last lines: in node {tail_on}'s summary)"
        lines += _first_failure_lines(head, failure.log, list(failure.tail or ()), show_tail)
        if failure.node == job.node:  # this node's process: its error file is here
            failed = [p for p in job.processes if p.spec.name == failure.name]
            lines += error_file_lines(failed[0].spec) if failed else []
    if failure.stacks and show_tail:
        lines.append("  stacks of every rank:")
        lines.extend(f"    {line}" for line in failure.stacks.splitlines())
    lines += _other_lines(job.processes, f"Node {job.node}'s processes:")
    lines.append(RULE)
    return "\n".join(lines) + "\n"


def nested_summary(job: JobRecord) -> str:
    """What `marun simulate` adds when its job failed: one line. Each simulated node's own marun
    has printed its summary (with the first failure's last lines) above."""
    return (
        f"marun simulate: the job failed, exit code {job.exit_code} (each simulated node's "
        "summary above says where and why)\n"
    )
