"""`marun run` from its parsed options to the exit code: the settings, what the platform
injected, this node's plan (supervision settings included), then execute it. Shared by the typer
CLI and the typer-free start path (marun.entry), so both run exactly the same code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def run_node(
    command: Sequence[str],
    mode: str,
    config: str | None,
    supervise: bool,
    cli: Mapping[str, object],
) -> int:
    """This node's plan, exec'd or supervised; the exit code. `cli`: the settings options given
    on the command line by name (None: not given)."""
    from marun.plan.modes import plan_from_environment
    from marun.runtime.execute import execute

    return execute(plan_from_environment(command, mode, config, cli, False, supervise))
