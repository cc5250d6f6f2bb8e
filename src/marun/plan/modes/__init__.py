"""The launch modes, one module each, loaded only when chosen.

A mode module exposes `plan(platform: Platform, all_nodes: bool) -> LaunchPlan`: a pure function
of what the platform handed us (plus the bounded waits the platform's contract requires, such as
a rank table still `initializing`). `build_plan` adds the supervision settings, checked first, so
`marun plan` and `marun run` refuse the same inputs before any wait.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import import_module

from marun.errors import InputError, bad_value
from marun.inputs.injected import Platform
from marun.plan.launch_plan import LaunchPlan

# Each mode's planner, by module name: imported only when chosen. MPI's planner lives with the
# rest of MPI mode (marun.mpi); naming it here keeps the import graph one-way.
PLANNERS = {
    "ascend": "marun.plan.modes.ascend",
    "mindspore": "marun.plan.modes.mindspore",
    "pytorch": "marun.plan.modes.pytorch",
    "tensorflow": "marun.plan.modes.tensorflow",
    "mpi": "marun.mpi.planner",
}
MODES = tuple(PLANNERS)


def detect_mode(platform: Platform) -> str:
    """`auto`: a rank table means ascend, an appended --init_method pytorch, appended
    --ps_hosts/--worker_hosts (or TF_WORKER_HOSTS/TF_PS_HOSTS) tensorflow; anything else must be
    named."""
    if platform.env.get("RANK_TABLE_FILE"):
        return "ascend"
    if "init_method" in platform.appended:
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
    from marun.inputs.ranktable import plans_per_device

    if plans_per_device(mode, platform):
        return None
    raw = platform.env.get("ASCEND_DEVICE_ID", "")
    if not raw.strip():
        return None
    from marun.inputs.numbers import parse_int

    device = parse_int("ASCEND_DEVICE_ID", raw, 0, 1023)
    if device == 0:
        return None
    from marun.plan.launch_plan import NodePlan

    note = (
        f"ASCEND_DEVICE_ID={device}: the platform starts this file once per device, and "
        f"{'mindspore mode' if mode == 'mindspore' else '--per-node'} plans the whole node "
        "from device 0's start; this start plans nothing and exits 0"
    )
    return LaunchPlan(mode, (NodePlan(0, platform.hostname),), (note,))


def build_plan(
    mode: str, platform: Platform, all_nodes: bool = False, always_supervise: bool = False
) -> LaunchPlan:
    """The plan `marun plan` shows and `marun run` executes. `always_supervise` is `--supervise`."""
    from marun.plan.modes.common import supervision

    watching = supervision(platform, always_supervise)
    if mode == "auto":
        mode = detect_mode(platform)
    if mode not in MODES:
        raise bad_value("--mode", mode, "auto or one of " + ", ".join(MODES))
    skipped = _other_device_start(mode, platform, all_nodes)
    if skipped is not None:
        return replace(skipped, supervision=watching)
    module = import_module(PLANNERS[mode])
    plan: LaunchPlan = module.plan(platform, all_nodes)
    coordination = None
    if not all_nodes:
        from marun.plan.coordination import coordination_for

        coordination = coordination_for(mode, platform, plan)
    notes = plan.notes
    procs = plan.nodes[0].processes if len(plan.nodes) == 1 else ()
    lone = len(procs) == 1 and not procs[0].daemon and not procs[0].restart_on_failure
    # With --all-nodes too: a one-node job's plan is the same either way, and so is what run does.
    if not always_supervise and lone and coordination is None:
        notes = (
            *notes,
            f"one process: marun execs it (unless marun is PID 1), so its output goes to "
            f"marun's own stdout and stderr, not to {procs[0].log}, and no result.json is "
            "written; --supervise keeps marun in front and writes both",
        )
    return replace(plan, supervision=watching, notes=notes, coordination=coordination)


def plan_from_environment(
    command: Sequence[str],
    mode: str,
    config: str | None,
    cli_settings: Mapping[str, object],
    all_nodes: bool = False,
    always_supervise: bool = False,
    *,
    dry_run: bool = False,
) -> LaunchPlan:
    """What `marun plan` shows and `marun run` executes: this process's environment and working
    directory, the settings (`cli_settings`: the options given, by Settings field name), the
    platform read from them, and the mode's plan. One function for both commands; `dry_run`
    (`marun plan`) waits for no host name (Platform.dry_run)."""
    from marun.inputs.injected import read_platform
    from marun.inputs.settings import load_settings

    env = dict(os.environ)
    cwd = os.getcwd()
    settings = load_settings(cli_settings, env, cwd, config).settings
    platform = read_platform(list(command), env, cwd, settings)
    if dry_run:
        platform = replace(platform, dry_run=True)
    return build_plan(mode, platform, all_nodes, always_supervise)
