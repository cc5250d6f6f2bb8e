"""`marun run` from its parsed options to the exit code: the settings, what the platform
injected, this node's plan, then execute it. Shared by the typer CLI and the typer-free start
path (marun.entry), so both run exactly the same code."""

from __future__ import annotations

import os
from typing import Any


def run_node(
    command: list[str], mode: str, config: str | None, supervise: bool, cli: dict[str, Any]
) -> int:
    """This node's plan, exec'd or supervised; the exit code. `cli`: the settings options given
    on the command line by name (None: not given)."""
    from marun.inputs.injected import read_platform
    from marun.inputs.settings import load_settings
    from marun.plan.modes import build_plan
    from marun.plan.modes.common import log_dir
    from marun.runtime.execute import execute

    env = dict(os.environ)
    cwd = os.getcwd()
    loaded = load_settings(cli, env, cwd, config)
    platform = read_platform(command, env, cwd, loaded.settings)
    launch_plan = build_plan(mode, platform, False)
    return execute(
        launch_plan, supervise=supervise, settings=platform.settings, record_dir=log_dir(platform)
    )
