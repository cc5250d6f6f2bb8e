"""job.json: every node's arrival and end as node 0's coordinator saw them, the job's exit code
and first failure (docs/supervision.md). Schema 1."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from marun.job.job_state import JobState, RoundRecord
from marun.job.roster import MemberState
from marun.plan.coordination import Coordination
from marun.runtime.failure import Failure


def job_report(
    coord: Coordination,
    members: Mapping[tuple[int, int], MemberState],
    *,
    exit_code: int | None,
    first_failure: Failure | None,
    started_at: float,
    refused: int,
    rounds: Sequence[RoundRecord] = (),
) -> dict[str, Any]:
    from marun.runtime.result import iso

    nodes = []
    for node in range(coord.nodes):
        slots = [members.get((node, s)) for s in range(coord.slots)]
        nodes.append(
            {
                "index": node,
                "host": next((m.host for m in slots if m), None),
                "slots": [
                    {
                        "slot": s,
                        "arrived": iso(m.arrived) if m else None,
                        "ended": iso(m.ended) if m else None,
                        "outcome": m.outcome if m else "missing",
                        "exit_code": m.exit_code if m else None,
                    }
                    for s, m in enumerate(slots)
                ],
            }
        )
    return {
        "schema": 1,
        "job": coord.job,
        "nodes_expected": coord.nodes,
        "exit_code": exit_code,
        "first_failure": None if first_failure is None else first_failure.to_wire(),
        "started": iso(started_at),
        "ended": iso(time.time()),
        "refused_messages": refused,
        "round": len(rounds),
        "rounds": [r.to_wire() for r in rounds],
        "nodes": nodes,
    }


def write_job_json(report: dict[str, Any], directory: str) -> str:
    """job.json into `directory` (atomic, 0600); its path."""
    import json
    import os

    from marun._files import atomic_write, private_dir

    path = os.path.join(private_dir(directory, strict=False), "job.json")
    atomic_write(path, json.dumps(report, indent=2) + "\n", 0o600)
    return path


def state_report(job: JobState, refused: int) -> dict[str, Any]:
    """job.json's content as node 0's job machine knows the job now (`refused`: connections
    the port turned away)."""
    from marun.job.preflight_barrier import section

    report = job_report(
        job.coord,
        job.members,
        exit_code=job.exit_code,
        first_failure=job.first_failure,
        started_at=job.started_at,
        refused=refused,
        rounds=job.rounds,
    )
    preflight = section(job)
    if preflight is not None:
        report["preflight"] = preflight
    progress = None if job.progress is None else job.progress.section(job.now)
    if progress is not None:
        report["progress"] = progress
    return report
