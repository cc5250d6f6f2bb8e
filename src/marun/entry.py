"""The `marun` command: `marun run` with a well-formed command line goes straight to the job
without importing typer (marun.run_argv says why); everything else is the typer CLI's."""

from __future__ import annotations

import sys

from marun.errors import MarunError


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["run"]:
        from marun.run_argv import parse_run

        parsed = parse_run(args[1:])
        if parsed is not None:
            from marun.runtime.start import run_node

            try:
                code = run_node(
                    parsed.command, parsed.mode, parsed.config, parsed.supervise, parsed.settings
                )
            except MarunError as exc:
                sys.stderr.write(f"marun: error: {exc}\n")
                sys.exit(exc.exit_code)
            except KeyboardInterrupt:  # Ctrl-C before the job starts: 130, as typer ends it
                import signal

                from marun.runtime.signals import exit_code_for

                sys.exit(exit_code_for(signal.SIGINT))
            sys.exit(code)
    from marun.cli import main as typer_main

    typer_main(args)
