"""What `marun simulate` does alike in every mode: the simulated job's name, the script's words
as every container runs them, and how this machine watches the simulated nodes."""

from __future__ import annotations

import os

from marun.inputs.injected import Platform
from marun.plan.launch_plan import Supervision

JOB = "marun-sim"


def script_words(platform: Platform) -> tuple[str, ...]:
    """The user's command with a script path made absolute: an ascend node runs elsewhere."""
    first = platform.command[0]
    if first.endswith(".py") or os.sep in first:
        first = os.path.abspath(os.path.join(platform.cwd, first))
    return (first, *platform.command[1:])


def outer_supervision(platform: Platform, sim_dir: str, fail_fast: bool = True) -> Supervision:
    """How this machine watches the simulated nodes: always supervised (even one node), result.json
    in the simulation directory, no prefix and no console selection (each inner `marun run`
    prefixes and selects its own lines). `fail_fast` off where the nodes coordinate (several
    nodes): each node's marun ends itself when the job stops, and says why."""
    settings = platform.settings
    return Supervision(
        grace_period=settings.grace_period,
        recovery_restarts=settings.recovery_restarts,
        recovery_wait=settings.recovery_wait,
        record_dir=sim_dir,
        always_supervise=True,
        prefix_output=False,
        fail_fast=fail_fast,
    )
