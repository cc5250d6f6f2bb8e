"""The launch modes, one module each, loaded only when chosen.

A mode module exposes `plan(platform: Platform, all_nodes: bool) -> LaunchPlan`: a pure function
of what the platform handed us (plus the bounded waits the platform's contract requires, such as
a rank table still `initializing`).
"""

from __future__ import annotations

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


def build_plan(mode: str, platform: Platform, all_nodes: bool = False) -> LaunchPlan:
    if mode == "auto":
        mode = detect_mode(platform)
    if mode not in MODES:
        raise bad_value("--mode", mode, "auto or one of " + ", ".join(MODES))
    module = import_module(PLANNERS[mode])
    plan: LaunchPlan = module.plan(platform, all_nodes)
    if mode != "mpi" and not all_nodes:
        from dataclasses import replace

        from marun.plan.coordination import coordination_for

        coordination = coordination_for(mode, platform, plan)
        if coordination is not None:
            plan = replace(plan, coordination=coordination)
    return plan
