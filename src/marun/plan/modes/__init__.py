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
    --ps_hosts/--worker_hosts tensorflow; anything else must be named."""
    if platform.env.get("RANK_TABLE_FILE"):
        return "ascend"
    if "init_method" in platform.appended:
        return "pytorch"
    if "ps_hosts" in platform.appended or "worker_hosts" in platform.appended:
        return "tensorflow"
    raise InputError(
        "--mode auto: found no RANK_TABLE_FILE, no appended --init_method and no appended "
        "--ps_hosts/--worker_hosts; expected --mode one of " + ", ".join(MODES)
    )


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
    module = import_module(PLANNERS[mode])
    plan: LaunchPlan = module.plan(platform, all_nodes)
    notes = plan.notes
    procs = plan.nodes[0].processes if len(plan.nodes) == 1 else ()
    if not all_nodes and not always_supervise and len(procs) == 1 and not procs[0].daemon:
        notes = (
            *notes,
            f"one process: marun execs it (unless marun is PID 1), so its output goes to "
            f"marun's own stdout and stderr, not to {procs[0].log}, and no result.json is "
            "written; --supervise keeps marun in front and writes both",
        )
    return replace(plan, supervision=watching, notes=notes)


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
