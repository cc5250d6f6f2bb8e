"""The plan as a table for people (`marun plan`, `marun simulate --full-plan`), and `render`,
`marun plan`'s choice of format; not on the path to exec, which writes the plan's JSON alone
(marun.plan.render)."""

from __future__ import annotations

import os
import shlex
from typing import Any

from marun.plan.launch_plan import LaunchPlan, NodePlan, node_execs
from marun.plan.render import masked_dict, render_json, render_yaml


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
            "port from its planned value + k and above round k-1's, on node 0"
        )
    return text + ")"


def render_table(plan: LaunchPlan, brief_after: int | None = None, full_env: bool = False) -> str:
    """The header (mode, supervision, records, notes, coordination); then what every process
    shares, shown once, what each node's processes share, and one table of processes x what
    differs (RANK, LOCAL_RANK, DEVICE_ID, MS_NODE_ID, ...); then the files written.
    `full_env`: instead, node by node, each process with its command, cwd, log and whole env.
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
    if watching.get("preload"):
        parts.append(f"preload {','.join(watching['preload'])} (a spare per process: see note)")
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
    if not full_env:
        out += _readable(nodes, brief)
        return "\n".join(out) + "\n"
    for i, node in enumerate(nodes):
        if brief and 0 < i < len(nodes) - 1:
            if i == 1:
                out += ["", f"nodes 1 to {len(nodes) - 2}: as node 0, each with its own ranks"]
            out.append(_node_line(node))
        else:
            out += _node_lines(node)
    return "\n".join(out) + "\n"


# A value longer than this (TF_CONFIG, a long path) is listed under the table, not in a column.
_WIDE = 40
_UNSET = "-"


def _role(proc: dict[str, Any]) -> str:
    return (
        str(proc["role"])
        + (" (daemon)" if proc["daemon"] else "")
        + (" (restarts)" if proc["restart_on_failure"] else "")
    )


def _same(values: list[str | None]) -> bool:
    return values[0] is not None and all(v == values[0] for v in values)


def _columns(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Left-aligned columns two spaces apart, the last one not padded."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths)] + row[-1:]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


class _View:
    """The processes of a plan's nodes as columns: the plan's fields (node, process, role,
    rank, cwd, log) and each variable, one value per process (None: not set)."""

    def __init__(self, nodes: list[dict[str, Any]], brief: bool) -> None:
        self.nodes = nodes
        # What is shared is shared by every process, shown or not (marun simulate --nodes 64).
        procs = [p for n in nodes for p in n["processes"]]
        where = [i for i, n in enumerate(nodes) for _ in n["processes"]]
        last = len(nodes) - 1
        self.shown = [at for at, i in enumerate(where) if not brief or i in (0, last)]
        self.one = len(procs) == 1
        self.count = len(procs)
        log_dirs: list[str | None] = [os.path.dirname(p["log"]) for p in procs]
        # Logs in one directory: it once, each log by its file name; the same for each node's
        # logs in a directory of the node's own (marun simulate's).
        self.log_dir = log_dirs[0] if not self.one and _same(log_dirs) else None
        self.node_log_dirs: dict[int, str] = {}
        if self.log_dir is None and len(nodes) > 1 and not self.one:
            by_node: dict[int, set[str | None]] = {}
            for at, i in enumerate(where):
                by_node.setdefault(i, set()).add(log_dirs[at])
            if all(len(d) == 1 for d in by_node.values()):
                self.node_log_dirs = {i: str(next(iter(d))) for i, d in by_node.items()}
        # Or each in its process's own cwd (Ascend's per-device directories).
        self.logs_in_cwd = (
            not self.one
            and self.log_dir is None
            and not self.node_log_dirs
            and all(d == p["cwd"] for d, p in zip(log_dirs, procs))
        )
        short = self.log_dir is not None or bool(self.node_log_dirs) or self.logs_in_cwd
        self.fields: dict[str, list[str | None]] = {
            "node": [str(nodes[i]["index"]) for i in where],
            "process": [p["name"] for p in procs],
            "role": [_role(p) for p in procs],
            "rank": [_UNSET if p["rank"] is None else str(p["rank"]) for p in procs],
            "cwd": [p["cwd"] for p in procs],
            "log": [os.path.basename(p["log"]) if short else p["log"] for p in procs],
        }
        self.commands: list[str | None] = [shlex.join(p["argv"]) for p in procs]
        names = sorted({k for p in procs for k in p["env"]})
        self.env = {k: [p["env"].get(k) for p in procs] for k in names}
        if short and not self.logs_in_cwd:  # a file in the log directory, by its name as a log is
            _by_file_name(self.env, [self.log_dir or self.node_log_dirs.get(i) for i in where])
        self.shared_env = [k for k in names if _same(self.env[k])]
        # Within each node: what its processes all share (GROUP_RANK, NODE_RANK, a NIC set on
        # node 0 only), on the node's line, when some node has several processes to share it.
        self.per_node: list[str] = []
        if len(nodes) > 1 and any(len(n["processes"]) > 1 for n in nodes):
            self.per_node = [
                k
                for k in names
                if k not in self.shared_env
                and all(len({p["env"].get(k) for p in n["processes"]}) <= 1 for n in nodes)
            ]
        differing = [k for k in names if k not in self.shared_env and k not in self.per_node]
        self.wide = [k for k in differing if any(len(v or "") > _WIDE for v in self.env[k])]
        self.columns = [k for k in differing if k not in self.wide]
        self.shared_fields = [k for k, v in self.fields.items() if self.one or _same(v)]
        self.table_fields = [k for k in self.fields if k not in self.shared_fields]


def _by_file_name(env: dict[str, list[str | None]], dirs: list[str | None]) -> None:
    """A variable whose values differ and are each a file in its process's log directory
    (torchrun's error file per rank) shown by the file's name, as the logs are."""
    for k, values in env.items():
        if len(set(values)) > 1 and all(
            v is None or (d is not None and os.path.dirname(v) == d) for v, d in zip(values, dirs)
        ):
            env[k] = [None if v is None else os.path.basename(v) for v in values]


def _readable(nodes: list[dict[str, Any]], brief: bool) -> list[str]:
    """What every process shares once; per node what its processes share; one table of
    processes x what differs between them; the files. Plan fields (node, process, role, rank,
    cwd, log, command) are in lower case, variables by their names."""
    if not any(n["processes"] for n in nodes):
        where = [f"node {n['index']}  {n['host']}: no processes" for n in nodes]
        return ["", *where, *_files(nodes, brief)]
    view = _View(nodes, brief)
    out = _shared_lines(view)
    if len(nodes) > 1:
        out += _node_section(view, brief)
    out += _process_lines(view)
    return out + _files(nodes, brief)


def _shared_lines(view: _View) -> list[str]:
    if view.one:
        out = ["", "the one process:"]
    else:
        out = ["", f"shared by every process ({view.count}); --full-env: each one's whole env"]
    rows: list[tuple[str, str]] = []
    for k in view.shared_fields:
        value = view.fields[k][0] or ""
        if k == "rank" and value == _UNSET and not view.one:
            continue  # none has a rank (MPI's sshd and leader): nothing to say
        if k == "node":
            if len(view.nodes) > 1:
                continue  # the nodes' section names it
            value += f"  {view.nodes[0]['host']}"
        rows.append((k, value))
    if view.log_dir is not None:
        rows.append(("log dir", view.log_dir))
    if view.logs_in_cwd:
        rows.append(("log dir", "each process's cwd"))
    if _same(view.commands):
        rows.append(("command", view.commands[0] or ""))
    width = max([len(k) for k, _ in rows] + [3])
    out += [f"  {k.ljust(width)}  {v}" for k, v in rows]
    for i, k in enumerate(view.shared_env):
        out.append(f"  {('env' if i == 0 else '').ljust(width)}  {k}={view.env[k][0]}")
    return out


def _node_section(view: _View, brief: bool) -> list[str]:
    """A line per node: its host and what its processes share."""
    out = ["", "each node:"]
    nodes = view.nodes
    hosts = max(len(n["host"]) for n in nodes)
    for i, node in enumerate(nodes):
        if brief and 0 < i < len(nodes) - 1:
            if i == 1:
                out.append(f"  nodes 1 to {len(nodes) - 2}: as node 0, each with its own ranks")
            out.append(_node_line(node))
            continue
        procs = node["processes"]
        line = f"  node {node['index']}  {node['host'].ljust(hosts)}"
        if not procs:
            line += ": no processes"
        values = [
            f"{k}={procs[0]['env'][k]}" for k in view.per_node if procs and k in procs[0]["env"]
        ]
        if i in view.node_log_dirs:
            values.insert(0, f"log dir {view.node_log_dirs[i]}")
        out.append((line + ("  " + "  ".join(values) if values else "")).rstrip())
    return out


def _process_lines(view: _View) -> list[str]:
    """The table of processes x what differs; then each long value on a line of its own."""
    out: list[str] = []
    env = view.env
    if not view.one:
        header = [*view.table_fields, *view.columns]
        body = []
        for at in view.shown:
            row = [view.fields[k][at] or "" for k in view.table_fields]
            row += [_UNSET if env[k][at] is None else str(env[k][at]) for k in view.columns]
            body.append(row)
        unset = f"; {_UNSET}: not set" if any(None in env[k] for k in view.columns) else ""
        out += ["", f"each process{unset}:", *_columns(header, body)]
    # A differing command, TF_CONFIG, ...: too long for a column.
    long: list[tuple[str, list[str | None]]] = [(k, env[k]) for k in view.wide]
    if not _same(view.commands):
        long.insert(0, ("command", view.commands))
    who = ["node", "process"] if "node" in view.table_fields else ["process"]
    for k, each in long:
        listed = [
            [
                *(view.fields[w][at] or "" for w in who),
                _UNSET if each[at] is None else str(each[at]),
            ]
            for at in view.shown
        ]
        out += ["", f"{k}, each process's:", *_columns([*who, k], listed)[1:]]
    return out


def _files(nodes: list[dict[str, Any]], brief: bool) -> list[str]:
    out: list[str] = []
    for i, node in enumerate(nodes):
        if brief and 0 < i < len(nodes) - 1:
            continue
        for f in node["files"]:
            out.append(f"file on node {node['index']}: {f['path']} (mode {f['mode']}):")
            out.append(_indent(f["content"], "    ").rstrip("\n"))
    return ["", *out] if out else out


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


def render(plan: LaunchPlan, fmt: str, full_env: bool = False) -> str:
    """The plan as `marun plan --format` asks: table, json or yaml."""
    if fmt == "json":
        return render_json(plan)
    if fmt == "yaml":
        return render_yaml(plan)
    return render_table(plan, full_env=full_env)
