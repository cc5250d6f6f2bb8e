"""The `marun` command: `entry.py` (the console script: a well-formed `marun run` goes straight
to `launch.run_node` through marun.run_argv's typer-free parser; anything else to typer),
`cli.py` (the typer commands, thin: parse, call one function), `options.py` (the options
`plan` and `run` share, declared once).

May import: everything (it is the top); nothing imports it but `marun.__main__`. This file
imports nothing, so that `marun run`'s path to the exec does not load typer."""
