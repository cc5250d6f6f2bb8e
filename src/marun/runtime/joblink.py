"""The supervisor's view of the job beyond this node: a small hook object, so that the runtime
never imports the coordination code (marun.job builds the real one, only for multi-node plans
with a coordination section; single-node jobs and the exec path load none of it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol


@dataclass(frozen=True)
class JobEvent:
    """What the leader says: `start` (every node has arrived), `stop` (with the job's exit
    code and its first failure: node, host, rank, exit code or signal, the last lines of its
    log, or `why` for a node lost or a hang) or `dump` (the hang watchdog wants every rank's
    stacks)."""

    kind: str
    code: int
    failure: Optional[dict[str, Any]]


class JobLink(Protocol):
    def fileno(self) -> int: ...

    def poll(self) -> list[JobEvent]: ...

    def activity(self) -> None:
        """A rank wrote something. Called from the relay's pump threads (one per pipe), each
        block they move: it must be cheap and safe from any thread."""

    def report_failure(self, failure: dict[str, Any]) -> None: ...

    def report_stacks(self, text: str) -> None: ...

    def report_end(self, outcome: str, exit_code: int, directory: str) -> int: ...

    def close(self) -> None: ...


def job_failure_summary(event: JobEvent, node: int, host: str) -> str:
    """The job's first failure, as every node prints it."""
    failure = event.failure or {}
    rule = "=" * 78
    lines = [
        rule,
        f"marun: the job stopped on every node, exit code {event.code} "
        f"(this is node {node}, {host})",
    ]
    where = failure.get("node")
    if "why" in failure:
        lines.append(f"Job's first failure: {failure['why']}")
    else:
        status = (
            f"signal {failure['signal']}"
            if failure.get("signal")
            else f"exit code {failure.get('exit_code')}"
        )
        lines.append(
            f"Job's first failure: node {where} ({failure.get('host', '?')}), process "
            f"{failure.get('name')} (rank {failure.get('rank')}), {status}"
        )
        if failure.get("log"):
            lines.append(f"  log: {failure['log']}")
    tail = failure.get("tail") or []
    if tail:
        lines.append("  last lines of its output:")
        lines.extend(f"    | {line}" for line in tail)
    if failure.get("stacks"):
        lines.append("  stacks of every rank:")
        lines.extend(f"    {line}" for line in str(failure["stacks"]).splitlines())
    lines.append(rule)
    return "\n".join(lines) + "\n"
