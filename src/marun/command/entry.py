"""The `marun` command: `marun run` with a well-formed command line goes straight to the job
without importing typer (marun.run_argv says why); everything else is the typer CLI's."""

from __future__ import annotations

import sys

from marun.errors import MarunError


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["run"]:
        from marun.runtime import early_signals

        early_signals.listen()  # from the first moment: a stop signal ends the job, at once
        from marun.run_argv import parse_run

        parsed = parse_run(args[1:])
        if parsed is not None:
            from marun.launch import run_node

            if parsed.verbose:
                from marun.log import set_verbose

                set_verbose()

            try:
                code = run_node(
                    parsed.command, parsed.mode, parsed.config, parsed.supervise, parsed.settings
                )
            except MarunError as exc:
                sys.stderr.write(f"marun: error: {exc}\n")
                sys.exit(exc.exit_code)
            _exit_at_once(code)
    from marun.command.cli import main as typer_main

    typer_main(args)


def _exit_at_once(code: int) -> None:
    """The job is over: every process reaped, result.json and the logs written and closed, the
    job's link closed. What is left of marun is its interpreter, whose teardown (freeing every
    module and object) adds about 20 ms to the end of every job for nothing: flush what Python
    buffers, then leave."""
    import contextlib
    import os

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone: nothing can reach it
            stream.flush()
    os._exit(code)
