"""Render a LaunchPlan for people (table) and tools (json, yaml), secrets masked."""

from __future__ import annotations

import json
import math
import os
import shlex
from json.encoder import encode_basestring_ascii as _string
from typing import Any

from marun.plan.launch_plan import LaunchPlan, NodePlan, node_execs
from marun.redact import mask_argv, mask_env


def masked_dict(plan: LaunchPlan) -> dict[str, Any]:
    data = plan.to_dict()
    for node in data["nodes"]:
        for proc in node["processes"]:
            proc["env"] = mask_env(proc["env"])
            proc["argv"] = mask_argv(proc["argv"])
    return data


def render_json(plan: LaunchPlan) -> str:
    data = masked_dict(plan)
    try:
        return indented_json(data) + "\n"
    except _NotPlain:
        return json.dumps(data, indent=2) + "\n"


class _NotPlain(Exception):
    """A value indented_json leaves to the json module."""


def indented_json(value: object) -> str:
    """Exactly `json.dumps(value, indent=2)` for dicts with string keys, lists, strings, ints,
    finite floats, bools and None, several times faster: json's indenting encoder is pure
    Python, one generator per container, and a plan of every node of a large job has hundreds of
    thousands of them."""
    parts: list[str] = []
    _encode(value, "\n", parts)
    return "".join(parts)


def _encode(value: object, newline: str, parts: list[str]) -> None:
    # `newline` is "\n" and the indentation of the line `value` starts on.
    if isinstance(value, str):
        parts.append(_string(value))
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif type(value) is int:
        parts.append(int.__repr__(value))
    elif type(value) is float and math.isfinite(value):  # the supervision's seconds
        parts.append(float.__repr__(value))
    elif isinstance(value, dict):
        if not value:
            parts.append("{}")
            return
        inner = newline + "  "
        sep = "{" + inner
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotPlain
            parts.append(sep)
            parts.append(_string(key))
            parts.append(": ")
            _encode(item, inner, parts)
            sep = "," + inner
        parts.append(newline + "}")
    elif isinstance(value, (list, tuple)):
        if not value:
            parts.append("[]")
            return
        inner = newline + "  "
        sep = "[" + inner
        for item in value:
            parts.append(sep)
            _encode(item, inner, parts)
            sep = "," + inner
        parts.append(newline + "]")
    else:
        raise _NotPlain


def render_yaml(plan: LaunchPlan) -> str:
    import yaml

    return str(yaml.safe_dump(masked_dict(plan), sort_keys=False, width=100))


def _indent(text: str, prefix: str) -> str:
    return "".join(prefix + line + "\n" for line in text.splitlines())


def _execs(plan: LaunchPlan, node: NodePlan) -> bool:
    """Whether `marun run` execs this node's one process (marun.runtime.execute decides the
    same way; PID 1 aside, which the plan cannot know)."""
    return node_execs(plan, node) and not plan.supervision.always_supervise


def _how_marun_runs(plan: LaunchPlan) -> str:
    execs = [_execs(plan, n) for n in plan.nodes if n.processes]
    if execs and all(execs):
        return "marun execs the one process (supervises it when PID 1)"
    if any(execs):
        return "marun execs a node's one process, supervises several"
    return "marun supervises"


def _record_dir(plan: LaunchPlan) -> str | None:
    """Where result.json and marun-events.log go: nowhere when every node's process is exec'd."""
    if all(_execs(plan, n) for n in plan.nodes):
        return None
    if plan.supervision.record_dir:
        return plan.supervision.record_dir
    first = next((n.processes[0] for n in plan.nodes if n.processes), None)
    return None if first is None else os.path.dirname(first.log)


def _rounds(watching: dict[str, Any]) -> str:
    """The restart rounds' rule, as `marun run` applies it (docs/supervision.md)."""
    text = f"max_restarts {watching['max_restarts']} (job-wide rounds"
    if watching["fatal_exit_codes"]:
        text += f"; none after exit {','.join(map(str, watching['fatal_exit_codes']))}"
    text += f"; none after two failures within {watching['quick_failure']:g}s of a round's start"
    if watching["round_ports"]:
        text += (
            f"; each round k >= 1 moves {','.join(watching['round_ports'])} to the first free "
            "port from its planned value + k, on node 0"
        )
    return text + ")"


def render_table(plan: LaunchPlan, brief_after: int | None = None) -> str:
    """Nodes x processes, each with its command, env, cwd and log; then the files written.
    `brief_after`: a job of more nodes than that (marun simulate --nodes 64) shows its first
    and last node in full and each one between on a line of its own."""
    data = masked_dict(plan)
    out: list[str] = []
    nprocs = sum(len(n["processes"]) for n in data["nodes"])
    shown = len(data["nodes"])
    coord = data.get("coordination")
    if coord is not None and shown == 1:
        # This node's plan of a bigger job: say which node, of how many.
        where = f"node {coord['index']} of {coord['nodes']}"
    else:
        where = f"nodes: {shown}"
    out.append(f"mode: {data['mode']}   {where}   processes: {nprocs}")
    watching = data["supervision"]
    parts = [f"grace_period {watching['grace_period']:g}s"]
    if any(p["restart_on_failure"] for n in data["nodes"] for p in n["processes"]):
        # Only MindSpore recovery restarts anything: elsewhere these two would mean nothing.
        parts.append(f"recovery_restarts {watching['recovery_restarts']}")
        parts.append(f"recovery_wait {watching['recovery_wait']:g}s")
    if watching["max_restarts"]:
        parts.append(_rounds(watching))
    parts.append(f"console_ranks {','.join(watching['console_ranks'])}")
    parts.append(_how_marun_runs(plan))
    out.append("supervision: " + "   ".join(parts))
    record = _record_dir(plan)
    if record is not None:
        from marun.plan.launch_plan import result_file_name

        index = data["nodes"][0]["index"] if shown == 1 else 0
        out.append(
            f"records: {record}/{result_file_name(index)}   events: {record}/marun-events.log"
        )
    for note in data["notes"]:
        out.append(f"note: {note}")
    if plan.coordination is not None:
        out.append(plan.coordination.describe())
    nodes = data["nodes"]
    brief = brief_after is not None and len(nodes) > brief_after
    for i, node in enumerate(nodes):
        if brief and 0 < i < len(nodes) - 1:
            if i == 1:
                out += ["", f"nodes 1 to {len(nodes) - 2}: as node 0, each with its own ranks"]
            out.append(_node_line(node))
        else:
            out += _node_lines(node)
    return "\n".join(out) + "\n"


def _node_line(node: dict[str, Any]) -> str:
    procs = ", ".join(
        p["name"] + ("" if p["rank"] is None else f" (rank {p['rank']})") for p in node["processes"]
    )
    return f"  node {node['index']}  {node['host']}: {procs}"


def _node_lines(node: dict[str, Any]) -> list[str]:
    """One node of the table: its processes, their cwd, log and env; its files."""
    out = ["", f"node {node['index']}  {node['host']}"]
    rows = [
        (
            p["name"],
            p["role"]
            + (" (daemon)" if p["daemon"] else "")
            + (" (restarts)" if p["restart_on_failure"] else ""),
            "-" if p["rank"] is None else str(p["rank"]),
            shlex.join(p["argv"]),
        )
        for p in node["processes"]
    ]
    header = ("PROCESS", "ROLE", "RANK", "COMMAND")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    w0, w1, w2 = widths
    fmt = f"  {{:<{w0}}}  {{:<{w1}}}  {{:>{w2}}}  {{}}"
    out.append(fmt.format(*header))
    for row in rows:
        out.append(fmt.format(*row))
    for p in node["processes"]:
        out.append(f"  {p['name']}: cwd {p['cwd']}  log {p['log']}")
        for key, value in sorted(p["env"].items()):
            out.append(f"      {key}={value}")
    for f in node["files"]:
        out.append(f"  file {f['path']} (mode {f['mode']}):")
        out.append(_indent(f["content"], "      ").rstrip("\n"))
    return out


def render(plan: LaunchPlan, fmt: str) -> str:
    if fmt == "json":
        return render_json(plan)
    if fmt == "yaml":
        return render_yaml(plan)
    return render_table(plan)
