"""The report's view of job.json's `progress` section (docs/supervision.md, "Progress"): where
the job's steps got to, its rate, the slowest ranks and the stragglers. Read as data from the
file: a section from another marun version, or a damaged one, shows what it holds."""

from __future__ import annotations

from typing import Any


def _list(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def progress_of(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """The report's `progress` value from job.json, or None when no rank printed steps."""
    section = (job or {}).get("progress")
    if not isinstance(section, dict):
        return None
    return {
        "unit": section.get("unit") if isinstance(section.get("unit"), str) else "steps",
        "step": section.get("step"),
        "total": section.get("total"),
        "rate": section.get("rate"),
        "slowest": _list(section.get("slowest")),
        "stragglers": _list(section.get("stragglers")),
    }


def progress_lines(section: dict[str, Any] | None) -> list[str]:
    """The text report's lines: where the steps got to, then one per straggler."""
    if section is None:
        return []
    unit = section["unit"]
    line = f"progress: {unit[:-1] if unit.endswith('s') else unit} {section['step']}"
    if section["total"] is not None:
        line += f" of {section['total']}"
    if isinstance(section["rate"], (int, float)):
        line += f", {section['rate']:g} {unit}/s"
    slowest = section["slowest"]
    if slowest:
        low = slowest[0]
        line += f"; slowest rank {low.get('rank')} (node {low.get('node')}) at {low.get('step')}"
    out = [line]
    for s in section["stragglers"]:
        out.append(
            f"  straggler: rank {s.get('rank')} (node {s.get('node')}) at {s.get('rate')}"
            f" {unit}/s, the median {s.get('median_rate')}, for {s.get('slow_for')}s"
        )
    return out
