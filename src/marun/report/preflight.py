"""The report's view of job.json's `preflight` section (docs/preflight.md): the decision, each
warning or refusal, each node's checks that did not pass, each link's figures. Read as data
from the file: a section from another marun version, or a damaged one, shows what it holds."""

from __future__ import annotations

from typing import Any


def _list(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def preflight_of(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """The report's `preflight` value from job.json, or None when the job ran none."""
    section = (job or {}).get("preflight")
    if not isinstance(section, dict):
        return None
    return {
        "policy": section.get("policy"),
        "decision": section.get("decision"),
        "seconds": section.get("seconds"),
        "findings": _list(section.get("findings")),
        "nodes": _list(section.get("nodes")),
        "links": _list(section.get("links")),
    }


def _ms(value: object) -> str:
    return f"{value * 1e3:.2f} ms" if isinstance(value, (int, float)) else "-"


def _rate(value: object) -> str:
    return f"{value / 1e6:.0f} MB/s" if isinstance(value, (int, float)) else "-"


def _link_line(link: dict[str, Any]) -> str:
    name = (
        f"node {link.get('src')} ({link.get('src_host')}) -> node {link.get('dst')}"
        f" ({link.get('dst_host')})"
    )
    if link.get("error"):
        return f"  link {name}: unreachable: {link['error']}"
    return (
        f"  link {name}: connect {_ms(link.get('connect_s'))}, round trip"
        f" {_ms(link.get('rtt_s'))}, {_rate(link.get('throughput'))}"
    )


def preflight_lines(section: dict[str, Any] | None) -> list[str]:
    """The text report's lines: one for the decision, one per finding, one per link."""
    if section is None:
        return []
    seconds = section["seconds"]
    took = f" in {seconds:.2f}s" if isinstance(seconds, (int, float)) else ""
    findings = section["findings"]
    out = [
        f"preflight ({section['policy']}): {section['decision']}{took},"
        f" {len(section['nodes'])} node(s), {len(section['links'])} link(s),"
        f" {len(findings)} finding(s)"
    ]
    for f in findings:
        where = f"node {f.get('node')} ({f.get('host')}): " if f.get("node") is not None else ""
        word = "refuses" if f.get("level") == "fail" else "warning"
        out.append(f"  {word}: {where}{f.get('check')}: {f.get('message')}")
    out += [_link_line(link) for link in section["links"]]
    return out
