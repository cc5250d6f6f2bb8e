"""The launch plan: a plain value saying what marun starts, where, and how it watches it.

Every mode is a function from the platform's inputs to a `LaunchPlan`. `marun plan` renders it,
`marun run` executes it: one code path up to this value, so a dry-run never disagrees with a run.
The JSON form (`to_dict`, read back by `from_dict`) is documented in docs/plan-schema.md and kept
stable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from marun.errors import InputError, bad_value
from marun.inputs.records import dataclass, field, replace
from marun.plan.console_selection import ConsoleSelection
from marun.plan.coordination import Coordination, JobShape, coordination_from_dict

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from typing import Any

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class FileSpec:
    """A file marun writes before starting anything (hostfile, sshd config, ...), with `mode`."""

    path: str
    content: str
    mode: int = 0o644


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start.

    `env` holds only what marun sets or changes; the process inherits the rest of marun's
    environment. `role` is the engine's name for the process (worker, scheduler, server, ps,
    chief, evaluator, sshd, leader: MPI's mpi-leader). `rank` is the job-wide rank where the
    engine has one. A `daemon` is a process
    that never ends by itself (a TF parameter server, sshd): it is stopped once the others are done
    and its exit does not count toward the job's status. `restart_on_failure`: a non-zero end
    restarts it (after `Supervision.recovery_wait`, up to `Supervision.recovery_restarts` times)
    instead of failing the job; the planner decides (MindSpore's recovery).
    """

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log: str
    role: str = "worker"
    rank: int | None = None
    daemon: bool = False
    restart_on_failure: bool = False
    # TCP ports the process will listen on (a rendezvous, a scheduler, a TF server): checked to
    # be free before anything starts, so that a taken port is one line, not a framework's
    # time-out minutes later.
    listens: tuple[int, ...] = ()


@dataclass(frozen=True)
class NodePlan:
    index: int
    host: str
    files: tuple[FileSpec, ...] = ()
    processes: tuple[ProcessSpec, ...] = ()


def _seconds(name: str, value: float) -> float:
    if not 0 <= value < math.inf:  # False for nan too
        raise bad_value(name, value, f"a finite number of seconds >= 0 ({_where(name)})")
    return float(value)


def _progress_pattern(pattern: str) -> None:
    """A step counter's pattern: a regular expression with a group for the step (named `step`,
    or the first)."""
    import re

    try:
        groups = re.compile(pattern)
    except re.error as exc:
        why = f"a regular expression ({exc})"
    else:
        if "step" in groups.groupindex or groups.groups:
            return
        why = "a regular expression with a group for the step: (?P<step>[0-9]+) or ([0-9]+)"
    raise bad_value("progress_pattern", pattern, f"{why} ({_where('progress_pattern')})")


def _preload(modules: tuple[str, ...], max_restarts: int) -> None:
    """`preload`: module names (dotted, as `import` takes them), and restart rounds for the
    spares to serve."""
    if not modules:
        return
    import re

    dotted = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
    for name in modules:
        if not isinstance(name, str) or not dotted.fullmatch(name):
            raise bad_value(
                "preload", name, f"module names, comma-separated (torch,numpy; {_where('preload')})"
            )
    if not max_restarts:
        raise bad_value(
            "preload",
            ",".join(modules),
            "restart rounds to serve (--max-restarts N, N > 0): a spare interpreter is used "
            "only when a restart round starts",
        )


def _where(name: str) -> str:
    return f"--{name.replace('_', '-')}, MARUN_{name.upper()} or config key {name}"


@dataclass(frozen=True)
class Supervision:
    """How `marun run` watches this node's processes: checked when the plan is built, so `marun
    plan` refuses exactly what `marun run` refuses, before anything starts.

    `always_supervise` (`--supervise`): supervise even a lone process instead of exec'ing it; part
    of the plan because whether marun stays is what the dry-run must show. `record_dir`: where
    result.json goes (None: the first process's log directory). `prefix_output`: prefix console
    lines with `[node:rank]` (off when the processes are whole `marun run`s that prefix their own).

    Restart rounds (docs/supervision.md, "Restart rounds"): `max_restarts` rounds for the whole
    job, none for a failure with one of `fatal_exit_codes` or one `quick_failure` seconds after
    its round's start twice running; in each round the variables named in `round_ports` (the
    rendezvous or scheduler port, found in the processes' environment) move to a free port.
    `recovery_restarts`/`recovery_wait`: MindSpore's process-level recovery, one process at a time.
    `collapse_window`: seconds a console line waits for the same line of the node's other ranks
    (0: off; on only where the node shows more than two ranks, marun.runtime.collapse).
    `progress_pattern`: the user's step counter (marun.progress.recognise), else the known ones.
    `preload`: modules a spare interpreter per rank imports while it waits to become that rank
    in the next restart round (docs/warm-restarts.md); only with restart rounds.
    """

    grace_period: float = 30.0
    recovery_restarts: int = 3
    recovery_wait: float = 30.0
    console_ranks: tuple[str, ...] = ()
    record_dir: str | None = None
    always_supervise: bool = False
    prefix_output: bool = True
    # Off only where the processes stop one another (marun simulate's nodes, which coordinate
    # as one job): stopping the others at the first failure would race their own ending.
    fail_fast: bool = True
    max_restarts: int = 0
    fatal_exit_codes: tuple[int, ...] = ()
    quick_failure: float = 30.0
    round_ports: tuple[str, ...] = ()
    collapse_window: float = 0.5
    progress_pattern: str | None = None
    preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _seconds("grace_period", self.grace_period)
        _seconds("collapse_window", self.collapse_window)
        if self.progress_pattern is not None:
            _progress_pattern(self.progress_pattern)
        _seconds("recovery_wait", self.recovery_wait)
        _seconds("quick_failure", self.quick_failure)
        for name in ("recovery_restarts", "max_restarts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise bad_value(name, value, f"a whole number >= 0 ({_where(name)})")
        for code in self.fatal_exit_codes:
            if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 255:
                raise bad_value(
                    "fatal_exit_codes",
                    code,
                    f"exit codes 1-255, comma-separated ({_where('fatal_exit_codes')})",
                )
        ConsoleSelection.parse(self.console_ranks)
        _preload(self.preload, self.max_restarts)

    @property
    def console(self) -> ConsoleSelection:
        return ConsoleSelection.parse(self.console_ranks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "grace_period": self.grace_period,
            "max_restarts": self.max_restarts,
            "fatal_exit_codes": list(self.fatal_exit_codes),
            "quick_failure": self.quick_failure,
            "round_ports": list(self.round_ports),
            "recovery_restarts": self.recovery_restarts,
            "recovery_wait": self.recovery_wait,
            # One representation in every format: the default (empty) is `all`.
            "console_ranks": list(self.console_ranks) or ["all"],
            "record_dir": self.record_dir,
            "always_supervise": self.always_supervise,
            "prefix_output": self.prefix_output,
            "fail_fast": self.fail_fast,
            "collapse_window": self.collapse_window,
            "progress_pattern": self.progress_pattern,
            "preload": list(self.preload),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Supervision:
        return cls(
            grace_period=float(data["grace_period"]),
            max_restarts=int(data.get("max_restarts", 0)),
            fatal_exit_codes=tuple(int(c) for c in data.get("fatal_exit_codes", ())),
            quick_failure=float(data.get("quick_failure", 30.0)),
            round_ports=tuple(str(v) for v in data.get("round_ports", ())),
            recovery_restarts=int(data.get("recovery_restarts", 3)),
            recovery_wait=float(data["recovery_wait"]),
            console_ranks=tuple(
                r for r in data["console_ranks"] if data["console_ranks"] != ["all"]
            ),
            record_dir=data["record_dir"],
            always_supervise=bool(data["always_supervise"]),
            prefix_output=bool(data["prefix_output"]),
            fail_fast=bool(data.get("fail_fast", True)),
            collapse_window=float(data.get("collapse_window", 0.5)),
            progress_pattern=data.get("progress_pattern"),
            preload=tuple(str(m) for m in data.get("preload", ())),
        )


def result_file_name(node: int) -> str:
    """`result.json` on node 0 (and on a one-node job), `result.node<i>.json` on node i: the
    nodes of a job often share one log directory (a shared volume), and no node may overwrite
    another's record."""
    return "result.json" if node == 0 else f"result.node{node}.json"


def plan_file_name(node: int) -> str:
    """`plan.json` on node 0 (and on a one-node job), `plan.node<i>.json` on node i: the plan a
    node's `marun run` carries out, kept with its logs (result_file_name's rule)."""
    return "plan.json" if node == 0 else f"plan.node{node}.json"


@dataclass(frozen=True)
class LaunchPlan:
    mode: str
    nodes: tuple[NodePlan, ...]
    notes: tuple[str, ...] = field(default=())
    supervision: Supervision = field(default_factory=Supervision)
    # How this node's marun joins the job's others (multi-node jobs of every mode but MPI):
    # built by marun.plan.build_coordination from `shape`, never by the planner.
    coordination: Coordination | None = None
    # The job's shape as the planner knows it (every planner states one; not part of the JSON
    # form, whose `coordination` says what run needs of it).
    shape: JobShape | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "mode": self.mode,
            "supervision": self.supervision.to_dict(),
            "nodes": [
                {
                    "index": n.index,
                    "host": n.host,
                    "files": [
                        {"path": f.path, "content": f.content, "mode": f"{f.mode:04o}"}
                        for f in n.files
                    ],
                    "processes": [
                        {
                            "name": p.name,
                            "argv": list(p.argv),
                            "env": dict(p.env),
                            "cwd": p.cwd,
                            "log": p.log,
                            "role": p.role,
                            "rank": p.rank,
                            "daemon": p.daemon,
                            "restart_on_failure": p.restart_on_failure,
                            **({"listens": list(p.listens)} if p.listens else {}),
                        }
                        for p in n.processes
                    ],
                }
                for n in self.nodes
            ],
            "notes": list(self.notes),
        }
        if self.coordination is not None:
            data["coordination"] = self.coordination.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchPlan:
        """The inverse of `to_dict` (a `marun plan --format json` read back; masked secrets stay
        masked). Fields added after a document was written take their defaults."""
        if data.get("schema") != SCHEMA_VERSION:
            raise bad_value("plan schema", data.get("schema"), f"{SCHEMA_VERSION}")
        try:
            return cls(
                mode=str(data["mode"]),
                nodes=tuple(_node_from_dict(n) for n in data["nodes"]),
                notes=tuple(str(n) for n in data.get("notes", ())),
                supervision=Supervision.from_dict(data["supervision"])
                if "supervision" in data
                else Supervision(),
                coordination=None
                if data.get("coordination") is None
                else coordination_from_dict(data["coordination"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"plan: not a plan of schema {SCHEMA_VERSION} ({exc!r})") from None


def node_execs(plan: LaunchPlan, node: NodePlan) -> bool:
    """Whether `marun run` execs `node`'s plan (marun becomes its process) rather than
    supervising it: one process, not a daemon, not one to restart on failure, on a node that
    coordinates with no other, in a job without restart rounds. The one place this is decided
    (the plan's notes, its rendering and the runtime ask here); the runtime adds what only it
    knows (marun as PID 1 never execs), and `--supervise` (Supervision.always_supervise) keeps
    marun in front."""
    procs = node.processes
    return (
        plan.coordination is None
        and plan.supervision.max_restarts == 0
        and len(procs) == 1
        and not procs[0].daemon
        and not procs[0].restart_on_failure
    )


# Where torch's `@record` entrypoint decorator writes a rank's exception as JSON (torchrun sets it
# for each process; pytorch mode plans it): the runtime clears it before each start and the
# failure summary shows it (marun.runtime.result).
ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"


# The variables that tell a process its restart round (marun's, and torchrun's where the process
# has them: PyTorch mode plans TORCHELASTIC_*).
ROUND_VAR, BUDGET_VAR = "MARUN_RESTART_COUNT", "MARUN_MAX_RESTARTS"
_TORCH_ROUND_VARS = ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")
# Every variable round_env may set (a spare interpreter is started without them: its round is
# not known yet).
ROUND_VARS = (ROUND_VAR, BUDGET_VAR, *_TORCH_ROUND_VARS)


def round_env(env: Mapping[str, str], round_: int, budget: int) -> dict[str, str]:
    """What a process of round `round_` is told, on top of its planned environment."""
    out = {ROUND_VAR: str(round_), BUDGET_VAR: str(budget)}
    if _TORCH_ROUND_VARS[0] in env:
        out.update(zip(_TORCH_ROUND_VARS, (str(round_), str(budget))))
    return out


def round_spec(
    spec: ProcessSpec, round_: int, budget: int, ports: Mapping[str, str]
) -> ProcessSpec:
    """The process as restart round `round_` starts it: its number and, where it has them, the
    round's ports (round 0: as planned)."""
    if round_ == 0:
        return spec
    env = {**spec.env, **round_env(spec.env, round_, budget)}
    env.update({k: v for k, v in ports.items() if k in spec.env})
    return replace(spec, env=env)


def warm_entry(argv: tuple[str, ...] | list[str]) -> tuple[str, str] | None:
    """What a spare interpreter (`preload`) would run for a process started as `argv`: ("path",
    SCRIPT) for `python SCRIPT.py ...`, ("module", MODULE) for `python -m MODULE ...`; None
    for anything else (a command, mpirun), which only a cold start can run. argv[0] must be a
    Python interpreter: the planner's resolve_command makes it one for these two shapes."""
    if len(argv) >= 3 and argv[1] == "-m":
        return ("module", argv[2])
    if len(argv) >= 2 and argv[1].endswith(".py") and not argv[1].startswith("-"):
        return ("path", argv[1])
    return None


def execs_lone_process(plan: LaunchPlan) -> bool:
    """`node_execs` for this node's plan (a plan of one node)."""
    return len(plan.nodes) == 1 and node_execs(plan, plan.nodes[0])


def _node_from_dict(data: Mapping[str, Any]) -> NodePlan:
    return NodePlan(
        index=int(data["index"]),
        host=str(data["host"]),
        files=tuple(
            FileSpec(str(f["path"]), str(f["content"]), int(str(f.get("mode", "0644")), 8))
            for f in data.get("files", ())
        ),
        processes=tuple(
            ProcessSpec(
                name=str(p["name"]),
                argv=tuple(str(a) for a in p["argv"]),
                env={str(k): str(v) for k, v in p["env"].items()},
                cwd=str(p["cwd"]),
                log=str(p["log"]),
                role=str(p.get("role", "worker")),
                rank=None if p.get("rank") is None else int(p["rank"]),
                daemon=bool(p.get("daemon", False)),
                restart_on_failure=bool(p.get("restart_on_failure", False)),
                listens=tuple(int(x) for x in p.get("listens", ())),
            )
            for p in data.get("processes", ())
        ),
    )
