"""The report rendered: text for a person (`render_text`), one self-contained HTML page with
the job's timeline as inline SVG (`render_html`: no script, no style sheet or font fetched)."""

from __future__ import annotations

import html
from typing import Any

from marun.report.preflight import preflight_lines
from marun.report.progress import progress_lines


def _s(value: object) -> str:
    return f"{value:.2f}s" if isinstance(value, (int, float)) else "-"


def _failure_lines(failure: dict[str, Any] | None) -> list[str]:
    if not failure:
        return ["first failure: none"]
    out = [f"first failure: {failure['summary']}"]
    if failure.get("no_restart"):
        out.append(f"  no round after it: {failure['no_restart']}")
    if failure.get("log"):
        out.append(f"  log: {failure['log']}")
    if failure.get("stacks"):
        out.append("  stacks: in job.json (first_failure.stacks) and in each rank's log")
    return out + [f"  | {line}" for line in failure["tail"]]


def _substitution_lines(r: dict[str, Any]) -> list[str]:
    """Hot spares: each place a spare took in the round."""
    return [
        f"  spare node {sub.get('spare')} ({sub.get('spare_host')}) took node {sub.get('lost')}'s"
        f" place ({sub.get('lost_host')}), place {sub.get('place')}"
        for sub in r.get("substitutions") or []
    ]


def render_text(summary: dict[str, Any]) -> str:
    """Outcome, first failure (and its last lines), rounds, phases, nodes, files: one line
    each."""
    out = []
    job = summary["job"] or (
        "(no job.json or result.json yet: still running?)"
        if summary["outcome"] == "running"
        else "(no job.json: one node's view)"
    )
    code = summary["exit_code"]
    out.append(
        f"job {job}: {summary['outcome']}, exit code {code if code is not None else '-'}"
        f" ({summary['nodes_expected'] or '?'} nodes, {len(summary['rounds'])} round(s),"
        f" {_s(summary['duration'])})"
    )
    out += _failure_lines(summary["first_failure"])
    for r in summary["rounds"]:
        line = f"round {r['round']} after {r['cause']}"
        if r["running_after"] is not None:
            ranks = f"all {r['ranks']} ranks" if r["ranks"] is not None else "every rank"
            line += (
                f": ranks stopped in {_s(r['stopped_after'])}, {ranks} running again"
                f" {_s(r['running_after'])} after it was detected"
            )
        elif r["at"] is not None:
            line += f": started at +{_s(r['at'])}"
        out += [line, *_substitution_lines(r)]
    ph = summary["phases"]
    arrival = f"arrival {_s(ph['arrival']['seconds'])}"
    if ph["arrival"]["slowest_node"] is not None:
        arrival += (
            f" (slowest: node {ph['arrival']['slowest_node']}, {ph['arrival']['slowest_host']})"
        )
    out.append(
        f"phases: {arrival}; start {_s(ph['start']['seconds'])}; run {_s(ph['run']['seconds'])};"
        f" stop {_s(ph['stop']['seconds'])}"
    )
    out += preflight_lines(summary.get("preflight"))
    out += progress_lines(summary.get("progress"))
    for n in summary["nodes"]:
        out.append(
            f"  node {n['index']} ({n['host']}): {n['outcome']}, exit code {n['exit_code']},"
            f" {n['processes']} process(es); arrived {_s(n['arrived'])}, started"
            f" {_s(n['started'])}, ended {_s(n['ended'])}"
        )
    files = summary["files"]
    if files["job"]:
        out.append(f"job.json: {files['job']}")
    for d in files["logs"]:
        out.append(f"logs: {d}")
    ev = summary["events"]
    if ev:
        errors = f" ({', '.join(ev['error_events'])})" if ev["error_events"] else ""
        out.append(
            f"events: {ev['path']}: {ev['warnings']} warning(s), {ev['errors']} error(s){errors}"
        )
    return "\n".join(out) + "\n"


_CSS = """body{font-family:sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}.failed{color:#b00020}.succeeded{color:#1b5e20}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap;overflow-wrap:anywhere}
svg text{font-size:12px;font-family:sans-serif}
.legend span{margin-right:1.2em}"""

_MARKS = {  # what -> (colour, shape) on the timeline
    "arrived": ("#1565c0", "circle"),
    "started": ("#2e7d32", "circle"),
    "round": ("#ef6c00", "line"),
    "failure": ("#b00020", "cross"),
    "ended": ("#555555", "square"),
}


class _Scale:
    """Where a time (seconds from the job's start) and a node's row are drawn."""

    LEFT, WIDTH, ROW, TOP = 150, 700, 34, 30

    def __init__(self, summary: dict[str, Any]) -> None:
        times = [summary["duration"] or 0.0] + [
            n[k] or 0.0 for n in summary["nodes"] for k in ("arrived", "started", "ended")
        ]
        self.span = max(times) or 1.0
        self.rows = {n["index"]: i for i, n in enumerate(summary["nodes"])}
        self.height = self.TOP + 10 + self.ROW * max(1, len(self.rows))

    def x(self, t: float) -> float:
        return round(self.LEFT + self.WIDTH * t / self.span, 1)

    def y(self, node: object) -> float:
        return self.TOP + self.ROW * self.rows[node] + self.ROW / 2


def _node_marks(summary: dict[str, Any], s: _Scale) -> list[str]:
    """A row per node: its name, a line, and its arrival, first start and end."""
    e, out = html.escape, []
    for n in summary["nodes"]:
        y = s.y(n["index"])
        out.append(
            f'<text x="8" y="{y + 4}">node {e(str(n["index"]))} {e(str(n["host"] or ""))}</text>'
            f'<line x1="{s.LEFT}" y1="{y}" x2="{s.LEFT + s.WIDTH}" y2="{y}" stroke="#ddd"/>'
        )
        for what in ("arrived", "started", "ended"):
            t = n[what]
            if t is None:
                continue
            colour, shape = _MARKS[what]
            tip = e(f"node {n['index']} ({n['host']}) {what} at +{t:.3f}s")
            if shape == "circle":
                body = f'<circle cx="{s.x(t)}" cy="{y}" r="5" fill="{colour}"/>'
            else:
                body = (
                    f'<rect x="{s.x(t) - 5}" y="{y - 5}" width="10" height="10" fill="{colour}"/>'
                )
            out.append(
                f'<g class="mark {what}" data-node="{n["index"]}"><title>{tip}</title>{body}</g>'
            )
    return out


def _event_marks(summary: dict[str, Any], s: _Scale) -> list[str]:
    """A dashed line across every row per round; a cross per failure on its node's row, the
    job's first failure bold (`id="first-failure"`)."""
    e, out = html.escape, []
    for r in summary["rounds"]:
        if r["at"] is None:
            continue
        tip = e(
            f"round {r['round']} after {r['cause']}: detected at +{r['at']:.3f}s, running again "
            f"{_s(r['running_after'])} later"
        )
        x = s.x(r["at"])
        out.append(
            f'<g class="mark round" data-round="{r["round"]}"><title>{tip}</title>'
            f'<line x1="{x}" y1="22" x2="{x}" y2="{s.height - 8}" '
            f'stroke="{_MARKS["round"][0]}" stroke-width="3" stroke-dasharray="6 3"/></g>'
        )
    for mark in summary["failures"]:
        if mark["node"] not in s.rows or mark["at"] is None:
            continue
        x, y, c = s.x(mark["at"]), s.y(mark["node"]), _MARKS["failure"][0]
        first = ' id="first-failure"' if mark["first"] else ""
        label = "the job's first failure" if mark["first"] else "failure"
        tip = e(f"{label} at +{mark['at']:.3f}s: {mark['text']}")
        out.append(
            f'<g class="mark failure"{first} data-node="{mark["node"]}"><title>{tip}</title>'
            f'<path d="M{x - 7},{y - 7} L{x + 7},{y + 7} M{x - 7},{y + 7} L{x + 7},{y - 7}" '
            f'stroke="{c}" stroke-width="{4 if mark["first"] else 2}"/></g>'
        )
    return out


def render_html(summary: dict[str, Any]) -> str:
    """One page, nothing fetched (inline CSS and SVG, no script): the job's timeline (a row
    per node: arrived, started, each round, each failure, ended; each mark with a <title>, the
    hover text), then the text report."""
    e, s = html.escape, _Scale(summary)
    axis = "".join(
        f'<text x="{s.x(s.span * k / 4) - 10}" y="16">+{s.span * k / 4:.2f}s</text>'
        for k in range(5)
    )
    legend = "".join(
        f'<span style="color:{c}">&#9632; {e(w)}</span>' for w, (c, _) in _MARKS.items()
    )
    marks = "".join(_node_marks(summary, s) + _event_marks(summary, s))
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline" '
        f'width="{s.LEFT + s.WIDTH + 60}" height="{s.height}" role="img" '
        f'aria-label="the job timeline">{axis}{marks}</svg>'
    )
    title = f"marun report: {summary['job'] or summary['log_dir']}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{e(title)}: <span class="{e(summary["outcome"])}" id="outcome">'
        f"{e(summary['outcome'])}, exit code {e(str(summary['exit_code']))}</span></h1>"
        f'<div class="legend">{legend}</div>{svg}'
        f'<h2>Report</h2><pre id="report">{e(render_text(summary))}</pre></body></html>\n'
    )
