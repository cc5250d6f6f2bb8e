"""The preflight at node 0's start barrier (docs/preflight.md), as moves of the job's state: each
node's marun (slot 0) sends its checks and its probe listener (`preflight`); once a node and the
next one have, node 0 tells that node its target (`probe`), so the probes run while the last
nodes still arrive; each node sends its probe of the next (`link`). With every node present and
every report and link in (or at arrival_timeout: what is missing is a warning), node 0 decides
(marun.preflight.decide): no rank starts anywhere when the decision refuses (every node ends with
its first line), else `start` carries the warnings for every node's console. job.json keeps the
section. "off": none of this runs, and marun.preflight is not imported."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from marun.exit_codes import LOST_EXIT
from marun.job.actions import Key
from marun.job.job_state import JobState
from marun.job.messages import Probe
from marun.runtime.failure import Failure


def on_report(job: JobState, key: Key, report: Any) -> None:
    """A node's report (once; from its slot 0): the probes that can go now."""
    if job.preflight == "off" or key[1] != 0 or job.start_sent or key[0] in job.pf_reports:
        return
    # The node is who its hello said, whatever its report says.
    job.pf_reports[key[0]] = replace(report, node=key[0])
    nodes = job.coord.nodes
    if nodes < 2:
        return
    for node in ((key[0] - 1) % nodes, key[0]):
        target = job.pf_reports.get((node + 1) % nodes)
        mine = job.pf_reports.get(node)
        member = job.members.get((node, 0))
        if target is None or mine is None or member is None or node in job.pf_probed:
            continue
        if target.probe_port > 0 and mine.probe_port > 0:
            job.pf_probed.add(node)
            job.send(member, Probe(target))


def on_link(job: JobState, key: Key, link: Any) -> None:
    if job.preflight == "off" or key[1] != 0 or job.start_sent or key[0] in job.pf_links:
        return
    job.pf_links[key[0]] = replace(link, src=key[0])


def complete(job: JobState) -> bool:
    """Every node's report, and every node's link where there is a ring."""
    nodes = job.coord.nodes
    if len(job.pf_reports) < nodes:
        return False
    ring = [n for n, r in job.pf_reports.items() if r.probe_port > 0]
    return nodes < 2 or len(ring) < 2 or all(n in job.pf_links for n in ring)


def decide(job: JobState) -> bool:
    """Node 0's decision now: True, start (with its warnings); False, the job is stopped."""
    from marun.preflight.decide import decide as decide_policy

    links = list(job.pf_links.values())
    decision = decide_policy(job.preflight, job.pf_reports, links, job.coord.nodes)
    job.pf_decision = decision
    job.pf_seconds = max(0.0, job.now - job.t0)
    lines = decision.lines()
    # (info: a refusal is the job's first failure, printed on every node's console as such)
    job.log("preflight", decision=decision.action, findings=len(decision.findings))
    if not decision.refused:
        return True
    if _replaced(job, decision):
        return True
    first = decision.findings[0] if decision.findings else None
    why = lines[0] if lines else "the preflight refused the start"
    failure = Failure(
        node=None if first is None else first.node,
        host=None if first is None else first.host,
        exit_code=LOST_EXIT,
        why=why,
    )
    job.stop(LOST_EXIT, failure)
    return False


def _replaced(job: JobState, decision: Any) -> bool:
    """Hot spares: a refusal that names nodes only (no link, not node 0) is healed before the
    start where spares that passed can take the refused nodes' places (marun.job.spares); the
    decision is then the start with its findings as warnings."""
    from marun.job import spares
    from marun.preflight.decide import START_WARNED, Decision
    from marun.preflight.result import FAIL

    if not spares.on(job):
        return False
    refused: dict[int, str] = {}
    for finding in decision.findings:
        if finding.level != FAIL:
            continue
        if finding.node is None:
            return False  # a link between two nodes: which one is broken is not known
        refused.setdefault(finding.node, finding.line())
    done = spares.replace_refused(job, refused)
    if done is None:
        return False
    job.pf_replaced = done
    job.pf_decision = Decision(START_WARNED, decision.policy, decision.findings)
    job.log("preflight_replaced", places=[d["place"] for d in done], refused=sorted(refused))
    return True


def notes(job: JobState) -> list[str]:
    decision = job.pf_decision
    said = [
        f"node {d['refused']} ({d['refused_host']}) refused by the preflight; spare node "
        f"{d['spare']} ({d['spare_host']}) takes its place"
        for d in job.pf_replaced
    ]
    return said + ([] if decision is None else list(decision.lines()))


def section(job: JobState) -> dict[str, Any] | None:
    """job.json's `preflight` (None: none ran)."""
    if job.pf_decision is None:
        return None
    from marun.preflight.decide import preflight_section

    links = list(job.pf_links.values())
    out = preflight_section(job.pf_decision, job.pf_reports, links, job.pf_seconds)
    if job.pf_replaced:
        out["replaced"] = list(job.pf_replaced)  # the places spares took before the start
    return out
