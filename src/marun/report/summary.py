"""The report's one value (`summarize`; `marun report --format json` prints it): the outcome and
exit code, the first failure, each restart round, every failure on the timeline, per-phase
timings, each node, and where the files are. Times are seconds from the job's start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marun.report.files import (
    TAIL_LINES,
    Found,
    find,
    index_of,
    read_events,
    seconds_between,
    tail_of,
    time_of,
)
from marun.report.preflight import preflight_of
from marun.report.progress import progress_of

SCHEMA = 1


def how(record: dict[str, Any]) -> str:
    """How a process or node ended: `exit 3`, `signal 9`, or the reason given."""
    if record.get("why"):
        return str(record["why"])
    if record.get("signal") is not None:
        return f"signal {record['signal']}"
    if record.get("exit_code") is not None:
        return f"exit {record['exit_code']}"
    return "ended"


def describe(record: dict[str, Any]) -> str:
    """A failure in a few words: `node 1 (h1) rank 3 [rank3] exit 3`; a failure that is no
    process's (a lost node, a hang, a signal to a node's marun) by its `why`, which names the
    node itself."""
    return str(record["why"]) if record.get("why") else f"{who(record)} {how(record)}"


def who(record: dict[str, Any]) -> str:
    """`node 1 (host) rank 3 [rank3]`, as far as the record says."""
    parts = []
    if record.get("node") is not None:
        host = f" ({record['host']})" if record.get("host") else ""
        parts.append(f"node {record['node']}{host}")
    if record.get("rank") is not None:
        parts.append(f"rank {record['rank']}")
    if record.get("name"):
        parts.append(f"[{record['name']}]")
    return " ".join(parts) or "the job"


def _outcome(found: Found) -> tuple[str, Any]:
    """The job's outcome and exit code (job.json's), else node 0's (a job of one node), else
    `running` (only events: nothing has ended yet)."""
    lead = found.lead
    if found.job is not None:
        code = found.job.get("exit_code")
        if code == 0:
            return "succeeded", code
        return ("interrupted" if lead.get("outcome") == "interrupted" else "failed"), code
    if lead:
        return str(lead.get("outcome", "unknown")), lead.get("exit_code")
    return "running", None


def _first_failure(found: Found) -> dict[str, Any] | None:
    raw = (found.job or {}).get("first_failure") if found.job else found.lead.get("first_failure")
    if not isinstance(raw, dict):
        return None
    failure = {k: raw.get(k) for k in ("node", "host", "name", "rank", "exit_code", "signal")}
    if found.job is None:  # one node's result.json: its failure is on that node
        failure["node"], failure["host"] = found.lead.get("node"), found.lead.get("host")
    log = raw.get("log")
    if log is None and raw.get("name"):
        procs = found.processes().get(index_of(failure["node"]), [])
        log = next((p.get("log") for p in procs if p.get("name") == raw["name"]), None)
    tail = raw.get("tail")
    failure.update(
        why=raw.get("why"),
        log=log,
        tail=[str(x) for x in tail][-TAIL_LINES:] if isinstance(tail, list) else tail_of(log),
        stacks=bool(raw.get("stacks")),
        no_restart=raw.get("no_restart"),
    )
    failure["summary"] = describe(failure)
    return failure


def _rounds(found: Found, started: float | None) -> list[dict[str, Any]]:
    """Each round: its cause, when node 0 heard of it, how long until its ranks were stopped
    (the barrier) and until every rank ran again."""
    out = []
    for r in (found.job or found.lead).get("rounds") or []:
        if not isinstance(r, dict):
            continue
        raw_cause = r.get("cause")
        cause: dict[str, Any] = raw_cause if isinstance(raw_cause, dict) else {}
        # job.json: when node 0 heard of the cause; a node's result.json: when it started
        detected = time_of(r.get("detected_at")) or time_of(r.get("started"))
        out.append(
            {
                "round": r.get("round"),
                "cause": describe(cause),
                "node": cause.get("node"),
                "at": seconds_between(detected, started),
                "stopped_after": seconds_between(time_of(r.get("stopped_at")), detected),
                "running_after": seconds_between(time_of(r.get("running_at")), detected),
                "ranks": r.get("ranks"),
                # hot spares: each place a spare took in this round (job.json)
                "substitutions": [
                    sub for sub in r.get("substitutions") or [] if isinstance(sub, dict)
                ],
            }
        )
    return out


def _job_nodes(job: dict[str, Any]) -> list[dict[str, Any]]:
    """job.json's nodes, the coordinator's view: a node arrived with its last slot, ended with
    its last one."""
    nodes = []
    for n in job.get("nodes") or []:
        slots = [s for s in n.get("slots") or [] if isinstance(s, dict)]
        arrived = [t for t in (time_of(s.get("arrived")) for s in slots) if t is not None]
        ends = [t for t in (time_of(s.get("ended")) for s in slots) if t is not None]
        codes = [s.get("exit_code") for s in slots]
        nodes.append(
            {
                "index": n.get("index"),
                "host": n.get("host"),
                "arrived": max(arrived) if arrived else None,
                "ended": max(ends) if ends else None,
                "outcome": ", ".join(sorted({str(s.get("outcome")) for s in slots})),
                "exit_code": next((c for c in codes if c), codes[0] if codes else None),
            }
        )
    return nodes


def _nodes(found: Found) -> list[dict[str, Any]]:
    """Each node with its first rank's start and its process count (from its result.json)."""
    if found.job is not None:
        nodes = _job_nodes(found.job)
    else:
        nodes = [
            {
                "index": data.get("node"),
                "host": data.get("host"),
                "arrived": time_of(data.get("started")),
                "ended": time_of(data.get("ended")),
                "outcome": data.get("outcome"),
                "exit_code": data.get("exit_code"),
            }
            for _, data in found.results
        ]
    by_node = found.processes()
    for entry in nodes:
        procs = by_node.get(index_of(entry["index"]), [])
        starts = [t for t in (time_of(p.get("started")) for p in procs) if t is not None]
        entry["started"] = min(starts) if starts else None
        entry["processes"] = len(procs)
    return nodes


def _phases(
    nodes: list[dict[str, Any]], started: float | None, ended: float | None, coordinated: bool
) -> dict[str, Any]:
    """arrival: node 0's start to the last node's report (the slowest node named); start: to
    the first rank started; run: to the first node's end; stop: to the job's end."""
    arrivals = [n for n in nodes if n["arrived"] is not None]
    slowest = max(arrivals, key=lambda n: n["arrived"]) if arrivals and coordinated else None
    last_arrival = slowest["arrived"] if slowest else None
    first_start = min((n["started"] for n in nodes if n["started"] is not None), default=None)
    first_end = min((n["ended"] for n in nodes if n["ended"] is not None), default=None)
    return {
        "arrival": {
            "seconds": seconds_between(last_arrival, started),
            "slowest_node": slowest["index"] if slowest else None,
            "slowest_host": slowest["host"] if slowest else None,
        },
        "start": {"seconds": seconds_between(first_start, last_arrival or started)},
        "run": {"seconds": seconds_between(first_end, first_start)},
        "stop": {"seconds": seconds_between(ended, first_end)},
    }


def _failures(
    found: Found,
    rounds: list[dict[str, Any]],
    failure: dict[str, Any] | None,
    nodes: list[dict[str, Any]],
    started: float | None,
) -> list[dict[str, Any]]:
    """Every failure on the timeline, earliest first: each round's cause (when node 0 heard of
    it) and the job's first failure (`first`: when its process ended)."""
    marks = [
        {
            "node": r["node"],
            "at": r["at"],
            "first": False,
            "text": f"{r['cause']} (round {r['round']} followed)",
        }
        for r in rounds
    ]
    if failure is not None:
        node = index_of(failure["node"])
        procs = found.processes().get(node, [])
        proc = next((p for p in procs if p.get("name") == failure["name"]), None)
        at = time_of(proc.get("ended")) if proc else None
        if at is None:
            at = next((n["ended"] for n in nodes if n["index"] == node), None)
        tail = " | ".join(failure["tail"])
        marks.append(
            {
                "node": node,
                "at": seconds_between(at, started),
                "first": True,
                "text": failure["summary"] + (f": {tail}" if tail else ""),
            }
        )
    marks.sort(key=lambda m: (m["at"] is None, m["at"] or 0.0))
    return marks


def summarize(log_dir: Path) -> dict[str, Any]:
    """The report of the job whose logs are in (or below) log_dir."""
    found = find(log_dir)
    record = found.job or found.lead
    outcome, exit_code = _outcome(found)
    started, ended = time_of(record.get("started")), time_of(record.get("ended"))
    failure = _first_failure(found)
    rounds = _rounds(found, started)
    nodes = _nodes(found)
    phases = _phases(nodes, started, ended, coordinated=found.job is not None)
    failures = _failures(found, rounds, failure, nodes, started)
    for n in nodes:
        for key in ("arrived", "started", "ended"):
            n[key] = seconds_between(n[key], started)
    events = found.events_file()
    return {
        "schema": SCHEMA,
        "log_dir": str(log_dir),
        "job": (found.job or {}).get("job"),
        "mode": found.lead.get("mode"),
        "outcome": outcome,
        "exit_code": exit_code,
        "nodes_expected": (found.job or {}).get("nodes_expected", len(nodes) or None),
        "started": record.get("started"),
        "ended": record.get("ended"),
        "duration": seconds_between(ended, started),
        "first_failure": failure,
        "rounds": rounds,
        "failures": failures,
        "phases": phases,
        "nodes": nodes,
        "preflight": preflight_of(found.job),
        "progress": progress_of(found.job),
        "files": {
            "job": str(found.job_path) if found.job_path else None,
            "results": [str(p) for p, _ in found.results],
            "events": str(events) if events else None,
            "logs": sorted({str(p.parent) for p, _ in found.results}),
        },
        "events": read_events(events) if events else None,
    }
