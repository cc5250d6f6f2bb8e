"""What the supervisor leaves behind: `result.json` for tools and, when the job failed, a
summary for people that names the first failing process (torchrun's "Root Cause (first observed
failure)").

result.json (schema 1), written atomically, mode 0600:
    {"schema": 1, "mode", "node", "host",
     "outcome": "succeeded" | "failed" | "interrupted",
     "exit_code": marun's own exit code,
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

from marun.plan.launch_plan import ProcessSpec
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
            "processes": [p.to_dict() for p in self.processes],
        }


def write_result(directory: str, job: JobRecord) -> str:
    """Write this node's record into `directory` atomically (a reader never sees half a file)."""
    from marun._files import atomic_write, private_dir
    from marun.plan.launch_plan import result_file_name

    path = os.path.join(private_dir(directory, strict=False), result_file_name(job.node))
    atomic_write(path, json.dumps(job.to_dict(), indent=2) + "\n", 0o600)
    return path


def failure_summary(job: JobRecord) -> str:
    """The block printed on stderr when the job failed: the root cause first, with the last lines
    of its output, then how every other process ended."""
    first = job.first_failure
    assert first is not None and first.ending is not None
    rule = "=" * 78
    lines = [
        rule,
        f"marun: job failed on node {job.node} ({job.host}), exit code {job.exit_code}",
        "Root Cause (first observed failure):",
        f"  node     : {job.node} ({job.host})",
        f"  process  : {first.spec.name} (role {first.spec.role}, rank "
        f"{'-' if first.spec.rank is None else first.spec.rank})",
        f"  pid      : {first.pids[-1] if first.pids else '-'}",
        f"  exit     : {describe(first.ending)}",
        f"  time     : {iso(first.ended)}",
        f"  restarts : {first.restarts}",
        f"  log      : {first.spec.log}",
    ]
    if first.error:
        lines.append(f"  error    : {first.error}")
    if first.tail:
        lines.append("  last lines of its output:")
        lines.extend(f"    | {line}" for line in first.tail)
    else:
        lines.append("  (it printed nothing)")
    others = [p for p in job.processes if p is not first]
    if others:
        lines.append("Other processes:")
        for proc in others:
            if proc.ending is None:
                state = "not started" if not proc.pids else "still running"
            else:
                state = describe(proc.ending)
                if proc.stopped_by is not None:
                    state += f" (stopped by marun with {signal_name(proc.stopped_by)})"
            rank = "-" if proc.spec.rank is None else proc.spec.rank
            lines.append(f"  {proc.spec.name} (rank {rank}): {state}")
    lines.append(rule)
    return "\n".join(lines) + "\n"
