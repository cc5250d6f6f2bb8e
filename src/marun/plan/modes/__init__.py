"""The launch modes, one planner module each, loaded only when chosen (marun.launch.planner
imports them; MPI's planner lives with the rest of MPI mode, in marun.mpi).

A planner is `plan(platform: Platform, all_nodes: bool) -> LaunchPlan`: a function of what the
platform handed us (plus the bounded waits the platform's contract requires, such as a rank
table still `initializing`) whose plan states the job's shape (`LaunchPlan.shape`). `plan_with`
adds the supervision settings, checked first, so `marun plan` and `marun run` refuse the same
inputs before any wait, and the coordination section (marun.plan.build_coordination).
"""

from __future__ import annotations

from collections.abc import Callable

from marun.errors import InputError, bad_value
from marun.inputs.injected import Platform
from marun.inputs.records import replace
from marun.plan.build_coordination import coordination_for
from marun.plan.launch_plan import LaunchPlan, Supervision, execs_lone_process

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from marun.plan.coordination import Coordination
    from marun.plan.spares import Layout

# The one list of modes; every other list of them is checked against it (tests/unit/test_modes).
MODES = ("ascend", "mindspore", "pytorch", "tensorflow", "mpi")
Planner = Callable[[Platform, bool], LaunchPlan]


def detect_mode(platform: Platform) -> str:
    """`auto`: a rank table means ascend, an appended --init_method pytorch, appended
    --ps_hosts/--worker_hosts (or TF_WORKER_HOSTS/TF_PS_HOSTS) tensorflow; anything else must be
    named."""
    if platform.env.get("RANK_TABLE_FILE"):
        return "ascend"
    if "init_method" in platform.appended or torchrun_options(platform):
        return "pytorch"
    if "ps_hosts" in platform.appended or "worker_hosts" in platform.appended:
        return "tensorflow"
    if (
        platform.env.get("TF_WORKER_HOSTS", "").strip()
        or platform.env.get("TF_PS_HOSTS", "").strip()
    ):
        return "tensorflow"  # the variables the platform makes the appended lists from
    raise InputError(
        "--mode auto: found no RANK_TABLE_FILE, no appended --init_method and no appended "
        "--ps_hosts/--worker_hosts nor TF_WORKER_HOSTS; expected --mode one of " + ", ".join(MODES)
    )


# torchrun's options for a job without the platform (pytorch mode's), by Settings field name.
TORCHRUN_OPTIONS = ("standalone", "nnodes", "node_rank", "master_addr", "master_port")


def torchrun_options(platform: Platform) -> list[str]:
    """The torchrun-style options given (`--standalone`, `--nnodes`, ...), as options."""
    # `is`, not `in (None, False)`: --node-rank 0 is given (0 == False)
    given = [(name, getattr(platform.settings, name)) for name in TORCHRUN_OPTIONS]
    return ["--" + name.replace("_", "-") for name, v in given if v is not None and v is not False]


def _other_device_start(mode: str, platform: Platform, all_nodes: bool) -> LaunchPlan | None:
    """Ascend's platform runs the start file once per device, each run with its own
    ASCEND_DEVICE_ID. The modes that start a whole node's processes from one run (mindspore from
    the node variables, and either mode with --per-node) would start them once per device: 8
    schedulers on one port, N x N workers. As the platform's documentation advises for such start
    files, only device 0's run plans the node; the others' plan is empty (marun exits 0 at once).
    A start that plans its own rank (`plans_per_device`) is planned as it is: every device's
    start then starts that device's worker, so each worker starts exactly once."""
    if mode not in ("mindspore", "ascend") or all_nodes:
        return None
    from marun.inputs.ranktable_platform import plans_per_device

    if plans_per_device(mode, platform):
        return None
    raw = platform.env.get("ASCEND_DEVICE_ID", "")
    if not raw.strip():
        return None
    from marun.inputs.numbers import parse_int

    device = parse_int("ASCEND_DEVICE_ID", raw, 0, 1023)
    if device == 0:
        return None
    from marun.plan.coordination import JobShape
    from marun.plan.launch_plan import NodePlan

    note = (
        f"ASCEND_DEVICE_ID={device}: the platform starts this file once per device, and "
        f"{'mindspore mode' if mode == 'mindspore' else '--per-node'} plans the whole node "
        "from device 0's start; this start plans nothing and exits 0"
    )
    return LaunchPlan(
        mode, (NodePlan(0, platform.hostname),), (note,), shape=JobShape.one_node(platform.hostname)
    )


def plan_with(
    mode: str,
    platform: Platform,
    planner: Callable[[str], Planner],
    all_nodes: bool = False,
    always_supervise: bool = False,
) -> LaunchPlan:
    """The plan `marun plan` shows and `marun run` executes, by `planner(mode)`'s planner
    (marun.launch.build_plan passes every mode's). `always_supervise` is `--supervise`."""
    from marun.plan.modes.common import supervision

    watching = supervision(platform, always_supervise)
    if mode == "auto":
        mode = detect_mode(platform)
    if mode not in MODES:
        raise bad_value("--mode", mode, "auto or one of " + ", ".join(MODES))
    foreign = torchrun_options(platform)
    if foreign and mode != "pytorch":
        raise InputError(
            f"{foreign[0]}: a pytorch option (torchrun's), given with --mode {mode}; expected "
            "--mode pytorch (or auto), or the platform's inputs of this mode"
        )
    skipped = _other_device_start(mode, platform, all_nodes)
    if skipped is not None:
        return replace(skipped, supervision=watching)
    spares = None
    if platform.settings.spares:  # hot spares (marun.plan.spares)
        from marun.plan.spares import layout

        spares = layout(mode, platform)
    if spares is None:
        plan = planner(mode)(platform, all_nodes)
        coordination = None if all_nodes else coordination_for(plan, platform)
    else:
        plan, coordination = _with_spares(mode, platform, planner, spares, all_nodes)
    if watching.max_restarts:
        plan = with_rounds(replace(plan, supervision=watching))
        watching = plan.supervision
    notes = (*plan.notes, *_near_miss_notes(platform), *_console_notes(plan, watching, all_nodes))
    if watching.preload:
        notes = (*notes, _preload_note(plan, platform.python, watching.preload))
    if (
        not always_supervise
        and coordination is None
        and execs_lone_process(replace(plan, supervision=watching))
    ):
        # With --all-nodes too: a one-node job's plan is the same either way, and so is run.
        log = plan.nodes[0].processes[0].log
        notes = (
            *notes,
            f"one process: marun execs it (unless marun is PID 1), so its output goes to "
            f"marun's own stdout and stderr, not to {log}, and no result.json is "
            "written; --supervise keeps marun in front and writes both",
        )
    return replace(plan, supervision=watching, notes=notes, coordination=coordination)


def _with_spares(
    mode: str,
    platform: Platform,
    planner: Callable[[str], Planner],
    spares: Layout,
    all_nodes: bool,
) -> tuple[LaunchPlan, Coordination | None]:
    """The plan of this node's place at the start (a spare: none, its processes planned once
    it has one) and the job's coordination over every node the platform started, spares too."""
    from marun.plan.coordination import Coordination
    from marun.plan.launch_plan import NodePlan
    from marun.plan.spares import as_place

    place = spares.place
    # A spare is planned as the last place until it has one (its inputs checked now; node 0's
    # host, which mpi mode reads from the host list, stays node 0's).
    placed = as_place(platform, spares.nodes - 1 if place is None else place, spares.nodes)
    plan = planner(mode)(placed, all_nodes)  # (a spare's too: its inputs are checked now)
    note = (
        f"hot spares: the job trains on {spares.nodes} node(s); the last {spares.spares} of the "
        f"platform's {spares.nodes + spares.spares} wait, and a lost node's place goes to one in "
        "the next restart round (node 0 cannot be replaced)"
    )
    if all_nodes:
        return replace(plan, notes=(*plan.notes, note)), None
    shape = plan.shape
    assert shape is not None
    total = spares.nodes + spares.spares
    coordination = coordination_for(
        replace(plan, shape=replace(shape, nodes=total, index=spares.index)), platform
    )
    assert isinstance(coordination, Coordination)
    coordination = replace(coordination, spares=spares.spares)
    if place is None:
        node = plan.nodes[0]
        waits = (
            f"node {spares.index} is a spare: it starts nothing and waits on the job's wire "
            "until node 0 gives it a lost node's place, then plans itself as that node"
        )
        plan = replace(plan, nodes=(NodePlan(spares.index, node.host),))
        return replace(plan, notes=(*plan.notes, note, waits)), coordination
    return replace(plan, notes=(*plan.notes, note)), coordination


def _preload_note(plan: LaunchPlan, python: str, modules: tuple[str, ...]) -> str:
    """`preload`: every process a round restarts must be one a spare interpreter can run (a
    .py script or -m MODULE under marun's interpreter), else one line, nothing started; the
    note says what the spares cost (docs/warm-restarts.md)."""
    from marun.plan.launch_plan import warm_entry

    ranks = 0
    for node in plan.nodes:
        for proc in node.processes:
            if proc.daemon:
                continue  # lives on from round to round: never restarted, no spare
            if warm_entry(proc.argv) is None or proc.argv[0] != python:
                raise InputError(
                    f"preload={','.join(modules)}: process {proc.name} runs {proc.argv[0]!r}, "
                    "not a Python script; expected a .py script or -m MODULE (a spare "
                    "interpreter can run only those), or no --preload"
                )
            ranks += 1
    where = "the job" if len(plan.nodes) > 1 else "this node"
    return (
        f"preload {','.join(modules)}: {ranks} spare interpreter(s) on {where}, one per "
        "process, each with these modules imported, waiting to become its process in the next "
        "restart round; started after each round's processes, at the lowest CPU priority where "
        "marun may restore it (SCHED_IDLE), they take no CPU while they wait, but hold their "
        f"imports' memory: {preload_cost(modules)} (docs/warm-restarts.md)"
    )


# What one spare holds while it waits, per framework module measured (docs/warm-restarts.md),
# written once: each module's note and the note for a list of none of them are made from it.
SPARE_RSS = {
    "torch": "0.22 GB RSS each with torch 2.13",
    "mindspore": "0.39 GB RSS each with mindspore 2.10",
}
# MindSpore's gain is said with its cost: a spare saves its imports, never its init().
PRELOAD_COST = {
    "torch": f"about {SPARE_RSS['torch']} (CPU), 0.15 GB of it its own",
    "mindspore": (
        f"about {SPARE_RSS['mindspore']} (CPU), 0.15 GB of it its own; a warm round saves "
        "MindSpore's import, not its init() (the cluster's formation), which runs in every round"
    ),
}


def preload_cost(modules: tuple[str, ...]) -> str:
    """The spares' cost for these modules: the figures of each measured one listed, else what
    the measured ones take, for scale."""
    tops = dict.fromkeys(module.split(".")[0] for module in modules)
    known = [PRELOAD_COST[top] for top in tops if top in PRELOAD_COST]
    if known:
        return "; ".join(known)
    return f"what these modules hold (measured: {', '.join(SPARE_RSS.values())})"


def _console_notes(plan: LaunchPlan, watching: Supervision, all_nodes: bool) -> tuple[str, ...]:
    """`--console-ranks 5` on a node whose ranks are 0-1: said, not silently shown nothing."""
    selection = watching.console
    processes = [p for node in plan.nodes for p in node.processes]
    if selection.everything or not processes:
        return ()
    ranks = sorted({p.rank for p in processes if p.rank is not None})
    words = {p.name for p in processes} | {p.role for p in processes}
    missing = [
        str(first) if first == last else f"{first}-{last}"
        for first, last in sorted(selection.ranks)
        if not any(first <= rank <= last for rank in ranks)
    ]
    missing += sorted(name for name in selection.names if name not in words)
    if not missing:
        return ()
    where = "the job" if all_nodes else "this node"
    have = f"ranks {ranks[0]}-{ranks[-1]}" if ranks else "no ranks"
    note = f"console_ranks {','.join(missing)}: no process of {where} ({have}) has it"
    note += "" if all_nodes else "; another node's marun shows it, if that node runs it"
    if not any(selection.shows(p.name, p.role, p.rank) for p in processes):
        note += f"; {where}'s console shows no process's output (log files have it all)"
    return (note,)


def _near_miss_notes(platform: Platform) -> tuple[str, ...]:
    """A platform variable that looks like a typo of one marun reads (`MA_NUM_GPU`, no S): a note
    in the plan, and at `marun run` a warning on stderr too (the plan's notes are not printed)."""
    from marun.inputs.variables import near_miss_note, platform_near_misses

    found = platform_near_misses(platform.env)
    if not found:
        return ()
    note = near_miss_note(found)
    if not platform.dry_run:
        from marun.log import get_logger

        get_logger("marun").warning("variable_near_miss", note=note)
    return (note,)


# The variables holding a port that a framework binds anew in each round (PyTorch's rendezvous
# store, MindSpore's scheduler): each round moves them to a port free on the node that binds it.
ROUND_PORT_VARS = ("MASTER_PORT", "MS_SCHED_PORT")


def with_rounds(plan: LaunchPlan) -> LaunchPlan:
    """A plan with restart rounds: every process is told round 0 and the budget (the supervisor
    sets the round's number in each later round), and the supervision names the port variables
    that move from round to round."""
    from marun.plan.launch_plan import round_env

    budget = plan.supervision.max_restarts
    ports = tuple(
        v for v in ROUND_PORT_VARS if any(v in p.env for n in plan.nodes for p in n.processes)
    )
    nodes = tuple(
        replace(
            node,
            processes=tuple(
                replace(p, env={**p.env, **round_env(p.env, 0, budget)}) for p in node.processes
            ),
        )
        for node in plan.nodes
    )
    return replace(plan, nodes=nodes, supervision=replace(plan.supervision, round_ports=ports))
