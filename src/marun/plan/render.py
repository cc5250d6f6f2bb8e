"""Render a LaunchPlan for people (table) and tools (json, yaml), secrets masked."""

from __future__ import annotations

import json
import shlex
from typing import Any

from marun.plan.launch_plan import LaunchPlan
from marun.redact import mask_argv, mask_env


def masked_dict(plan: LaunchPlan) -> dict[str, Any]:
    data = plan.to_dict()
    for node in data["nodes"]:
        for proc in node["processes"]:
            proc["env"] = mask_env(proc["env"])
            proc["argv"] = mask_argv(proc["argv"])
    return data


def render_json(plan: LaunchPlan) -> str:
    return json.dumps(masked_dict(plan), indent=2) + "\n"


def render_yaml(plan: LaunchPlan) -> str:
    import yaml

    return str(yaml.safe_dump(masked_dict(plan), sort_keys=False, width=100))


def _indent(text: str, prefix: str) -> str:
    return "".join(prefix + line + "\n" for line in text.splitlines())


def render_table(plan: LaunchPlan) -> str:
    """Nodes x processes, each with its command, env, cwd and log; then the files written."""
    data = masked_dict(plan)
    out: list[str] = []
    nprocs = sum(len(n["processes"]) for n in data["nodes"])
    out.append(f"mode: {data['mode']}   nodes: {len(data['nodes'])}   processes: {nprocs}")
    for note in data["notes"]:
        out.append(f"note: {note}")
    if plan.coordination is not None:
        out.append(plan.coordination.describe())
    for node in data["nodes"]:
        out.append("")
        out.append(f"node {node['index']}  {node['host']}")
        rows = [
            (
                p["name"],
                p["role"] + (" (daemon)" if p["daemon"] else ""),
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
            out.append(f"  file {f['path']}:")
            out.append(_indent(f["content"], "      ").rstrip("\n"))
    return "\n".join(out) + "\n"


def render(plan: LaunchPlan, fmt: str) -> str:
    if fmt == "json":
        return render_json(plan)
    if fmt == "yaml":
        return render_yaml(plan)
    return render_table(plan)
