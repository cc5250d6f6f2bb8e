"""The `marun` command: `marun run` with a well-formed command line goes straight to the job
without importing typer (marun.run_argv says why); everything else is the typer CLI's."""

from __future__ import annotations

import os
import sys
from typing import Any

from marun.errors import MarunError


def run_job(
    command: list[str], mode: str, config: str | None, supervise: bool, cli: dict[str, Any]
) -> int:
    """`marun run`: this node's plan, exec'd or supervised; the exit code."""
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


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["run"]:
        from marun.run_argv import parse_run

        parsed = parse_run(args[1:])
        if parsed is not None:
            try:
                code = run_job(
                    parsed.command, parsed.mode, parsed.config, parsed.supervise, parsed.settings
                )
            except MarunError as exc:
                sys.stderr.write(f"marun: error: {exc}\n")
                sys.exit(exc.exit_code)
            except KeyboardInterrupt:  # Ctrl-C before the job starts: what typer does
                sys.exit(130)
            sys.exit(code)
    from marun.cli import main as typer_main

    typer_main(args)
