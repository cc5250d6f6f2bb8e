"""`marun run`'s typer-free parser (marun.run_argv) against the typer command it stands in for:
the same table, the same values for well-formed command lines, and typer's answer for the rest."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main

from marun.command.cli import app
from marun.run_argv import FALSE_WORDS, RUN_OPTIONS, SETTING_OPTIONS, parse_run

RUN = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]


def _typer_kind(param: Any) -> str:
    if param.is_flag:
        return "bool" if param.secondary_opts else "flag"
    return {"int": "int", "float": "float", "choice": "mode", "str": "str"}[param.type.name]


def test_the_table_is_the_typer_commands() -> None:
    from_typer: dict[str, tuple[str, str]] = {}
    false_words: set[str] = set()
    for param in RUN.params:
        if param.param_type_name != "option":
            continue
        for opt in [*param.opts, *param.secondary_opts]:
            from_typer[opt] = (param.name, _typer_kind(param))
        false_words.update(param.secondary_opts)
    assert from_typer == RUN_OPTIONS
    assert false_words == FALSE_WORDS
    settings = {name for name, _ in RUN_OPTIONS.values()} - {
        "mode",
        "config",
        "supervise",
        "verbose",
    }
    assert settings == set(SETTING_OPTIONS)


WELL_FORMED = [
    ["--", "train.py", "--init_method", "tcp://h:1"],
    ["train.py", "--lr", "1", "--", "x"],
    ["--mode", "pytorch", "--nproc-per-node", "4", "train.py"],
    ["--mode=mindspore", "--nproc-per-node=2", "--grace-period", "2.5", "--", "t.py"],
    ["--per-device", "--per-node", "--keep-platform-args", "--tf-chief", "--supervise", "t.py"],
    ["--per-device", "--", "t.py"],
    ["--console-ranks", "0,3-5", "--log-dir", "logs", "--nic", "lo", "--config", "c.yaml", "t"],
    ["--max-restarts", "-1", "--recovery-wait", "0", "t.py"],
    ["--grace-period", "1", "--grace-period", "2", "-", "-x"],
    [],
    ["--supervise"],
    ["--verbose", "--supervise", "t.py"],
]


@pytest.mark.parametrize("argv", WELL_FORMED, ids=[" ".join(a) or "(none)" for a in WELL_FORMED])
def test_well_formed_command_lines_parse_as_typer_does(argv: list[str]) -> None:
    parsed = parse_run(argv)
    assert parsed is not None
    expected = RUN.make_context("run", list(argv)).params
    assert parsed.command == list(expected.pop("command") or [])
    mode = expected.pop("mode")
    assert parsed.mode == getattr(mode, "value", mode)
    assert parsed.config == expected.pop("config")
    assert parsed.supervise == expected.pop("supervise")
    assert parsed.verbose == expected.pop("verbose")
    assert parsed.settings == expected


TYPERS_TO_ANSWER = [
    ["--help"],
    ["-h"],
    ["--nproc"],
    ["--bogus", "t.py"],
    ["--nproc-per-node"],
    ["--mode", "Pytorch", "t.py"],
    ["--supervise=1", "t.py"],
]


@pytest.mark.parametrize("argv", TYPERS_TO_ANSWER, ids=[" ".join(a) for a in TYPERS_TO_ANSWER])
def test_anything_unsure_is_left_to_typer(argv: list[str]) -> None:
    assert parse_run(argv) is None
