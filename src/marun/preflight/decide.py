"""Node 0's decision from every node's preflight: start, start with warnings, or refuse; and
the ring's targets, and job.json's `preflight` section. Pure functions of the reports.

Policies (`--preflight`, inputs.settings.PREFLIGHT_POLICIES): `on` (the default) refuses on an
unreachable link or missing devices and warns on everything else; `warn` only warns; `strict`
refuses on any warning or failure; `off` runs nothing (`decide` then says start).

A link is slow when it is `factor` times slower than the job's good links (a quarter of the
links do as well: `_quartile`) and also slower by an absolute margin (`Thresholds`): the
probe keeps the best of several round trips and chunks, and a scheduler's stall on a busy
machine moves that by milliseconds, never by the margin, so a healthy job is not warned about.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marun.inputs.settings import PREFLIGHT_POLICIES
from marun.preflight.result import FAIL, OK, SKIP, WARN, LinkResult, NodeReport

START, START_WARNED, REFUSE = "start", "start with warnings", "refuse"
REFUSING_CHECKS = ("devices",)  # what the default policy refuses on, besides unreachable links


@dataclass(frozen=True)
class Thresholds:
    factor: float = 4.0  # times the good links' round trip or chunk time
    rtt_margin: float = 0.01  # seconds: and at least this much more round trip
    chunk_margin: float = 0.1  # seconds: and at least this much longer for one chunk (1 MiB)
    chunk: int = 1 << 20  # bytes of one chunk (marun.preflight.ring.CHUNK)


@dataclass(frozen=True)
class Finding:
    """One warning or refusal: the node (or link) it names, the check, one line."""

    level: str  # WARN or FAIL (refuses)
    check: str
    message: str
    node: int | None = None
    host: str | None = None

    def line(self) -> str:
        where = f"node {self.node} ({self.host}): " if self.node is not None else ""
        return f"{where}{self.check}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "check": self.check,
            "message": self.message,
            "node": self.node,
            "host": self.host,
        }


@dataclass(frozen=True)
class Decision:
    action: str  # START, START_WARNED or REFUSE
    policy: str
    findings: tuple[Finding, ...] = ()

    @property
    def refused(self) -> bool:
        return self.action == REFUSE

    def lines(self) -> list[str]:
        """One line each, as every node's console shows them."""
        if self.refused:
            first = next(f for f in self.findings if f.level == FAIL)
            more = len(self.findings) - 1
            tail = f" (and {more} more in job.json's preflight)" if more else ""
            return [f"preflight refused the start: {first.line()}{tail}"]
        return [f"preflight warning: {f.line()}" for f in self.findings]


def ring_targets(reports: Mapping[int, NodeReport]) -> dict[int, NodeReport]:
    """node -> the report of the node it probes: the next node with a listener, in index
    order, wrapping around (a node without a listener, probe_port 0, is left out of the ring).
    One node, or none with a listener: no link."""
    ring = sorted(i for i, r in reports.items() if r.probe_port > 0)
    if len(ring) < 2:
        return {}
    return {node: reports[ring[(k + 1) % len(ring)]] for k, node in enumerate(ring)}


def _quartile(values: Sequence[float], upper: bool) -> float:
    """The upper (lower) quartile of `values`: the rate a quarter of the links reach, the round
    trip a quarter of them beat. Not the median: in a ring a node with a slow NIC slows both
    its links, so in a small job the median link may be one of them."""
    ordered = sorted(values)
    at = (len(ordered) - 1) * 0.75 if upper else (len(ordered) - 1) * 0.25
    return ordered[math.ceil(at) if upper else math.floor(at)]


def slow_links(links: Sequence[LinkResult], t: Thresholds = Thresholds()) -> list[Finding]:
    """The reachable links far slower than the job's good ones: a round trip `factor` times a
    quarter of the links' and `rtt_margin` more, or a chunk's time `factor` times and
    `chunk_margin` more."""
    found: list[Finding] = []
    reachable = [link for link in links if link.reachable]
    rtts = [link.rtt_s for link in reachable if link.rtt_s is not None]
    rates = [link.throughput for link in reachable if link.throughput]
    good_rtt = _quartile(rtts, upper=False) if rtts else None
    good_chunk = t.chunk / _quartile(rates, upper=True) if rates else None
    for link in reachable:
        rtt = link.rtt_s
        if (
            good_rtt is not None
            and rtt is not None
            and rtt > t.factor * good_rtt
            and rtt - good_rtt > t.rtt_margin
        ):
            message = (
                f"round trip {rtt * 1e3:.1f} ms, where a quarter of the job's links take"
                f" {good_rtt * 1e3:.2f} ms or less"
            )
            found.append(_link_finding(WARN, "slow link", link, message))
            continue
        if good_chunk is not None and link.throughput:
            took = t.chunk / link.throughput
            if took > t.factor * good_chunk and took - good_chunk > t.chunk_margin:
                message = (
                    f"{link.throughput / 1e6:.1f} MB/s, where a quarter of the job's links"
                    f" reach {t.chunk / good_chunk / 1e6:.1f} MB/s"
                )
                found.append(_link_finding(WARN, "slow link", link, message))
    return found


def _link_finding(level: str, check: str, link: LinkResult, message: str) -> Finding:
    return Finding(level, check, f"{link.name()}: {message}", node=None, host=None)


def findings_of(
    reports: Mapping[int, NodeReport],
    links: Sequence[LinkResult],
    nodes: int,
    t: Thresholds = Thresholds(),
) -> list[Finding]:
    """Every check that did not pass, every unreachable or slow link, every node that sent no
    report, as found (level: the check's own, WARN or FAIL)."""
    found: list[Finding] = []
    for node in range(nodes):
        report = reports.get(node)
        if report is None:
            found.append(Finding(WARN, "report", "sent no preflight report", node, "?"))
            continue
        for check in report.checks:
            if check.status in (WARN, FAIL):
                found.append(Finding(check.status, check.name, check.message, node, report.host))
    for link in links:
        if not link.reachable:
            found.append(_link_finding(FAIL, "unreachable link", link, str(link.error)))
    return found + slow_links(links, t)


def _refuses(policy: str, finding: Finding) -> bool:
    if policy == "strict":
        return True
    if policy == "warn" or finding.level != FAIL:
        return False
    return finding.check in REFUSING_CHECKS or finding.check == "unreachable link"


def decide(
    policy: str,
    reports: Mapping[int, NodeReport],
    links: Sequence[LinkResult],
    nodes: int,
    t: Thresholds = Thresholds(),
) -> Decision:
    """Node 0's decision for the job of `nodes` nodes from the reports and links it has (a
    node missing from `reports` sent none in time: a warning)."""
    if policy not in PREFLIGHT_POLICIES:
        raise ValueError(f"preflight policy {policy!r}: expected one of {PREFLIGHT_POLICIES}")
    if policy == "off":
        return Decision(START, policy)
    found = findings_of(reports, links, nodes, t)
    ranked = [
        Finding(FAIL if _refuses(policy, f) else WARN, f.check, f.message, f.node, f.host)
        for f in found
    ]
    ranked.sort(key=lambda f: f.level != FAIL)  # refusals first, stable otherwise
    if any(f.level == FAIL for f in ranked):
        return Decision(REFUSE, policy, tuple(ranked))
    return Decision(START_WARNED if ranked else START, policy, tuple(ranked))


def preflight_section(
    decision: Decision,
    reports: Mapping[int, NodeReport],
    links: Sequence[LinkResult],
    seconds: float | None = None,
) -> dict[str, Any]:
    """job.json's `preflight` (docs/preflight.md): the decision, its findings, per node its
    checks, per link its figures."""
    return {
        "policy": decision.policy,
        "decision": decision.action,
        "seconds": None if seconds is None else round(seconds, 3),
        "findings": [f.to_dict() for f in decision.findings],
        "nodes": [
            {
                "index": r.node,
                "host": r.host,
                "address": r.address,
                "status": _node_status(r),
                "checks": [c.to_dict() for c in r.checks],
            }
            for _, r in sorted(reports.items())
        ],
        "links": [link.to_dict() for link in sorted(links, key=lambda x: (x.src, x.dst))],
    }


def _node_status(report: NodeReport) -> str:
    statuses = [c.status for c in report.checks if c.status != SKIP]
    return FAIL if FAIL in statuses else WARN if WARN in statuses else OK
