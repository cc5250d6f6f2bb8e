"""`marun run`'s typer-free parser (marun.run_argv) against the typer command it stands in for:
the same table, the same values for well-formed command lines, and typer's answer for the rest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from marun.cli import app
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


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--mode", "Pytorch"], "Invalid value for '--mode'"),
        (["--nproc-per-node", "four"], "--nproc-per-node='four': expected an integer"),
        (["--grace-period", "nan"], "--grace-period='nan': expected a number of seconds"),
    ],
)
def test_a_refused_option_gets_the_same_line_on_both_paths(
    tmp_path: Path, words: list[str], message: str
) -> None:
    """Option values are checked by the settings parser on both paths (numbers included); what
    the hand parser is unsure of goes to typer: either way, one identical line."""
    argv = ["run", *words, "--", "t.py"]
    through_main = subprocess.run(
        [sys.executable, "-m", "marun", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    through_typer = subprocess.run(
        [sys.executable, "-c", "from marun.cli import main; main()", *argv],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert through_main.returncode == through_typer.returncode == 2
    assert message in through_main.stderr
    assert through_main.stderr.count("\n") == 1
    assert through_main.stderr == through_typer.stderr


def test_marun_run_does_not_import_typer(tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text("import sys; print('typer' in sys.modules)\n")
    code = (
        "import sys, marun.entry; sys.argv = ['marun', 'run', '--', 'show.py', '--init_method',"
        " 'tcp://127.0.0.1:29500']; import os; os.execvpe = lambda *a: (print("
        "sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich'))),"
        " sys.exit(0)); marun.entry.main()"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert res.stdout == "[]\n", res.stderr


def test_ctrl_c_before_the_job_starts_ends_as_typer_ends_it(tmp_path: Path) -> None:
    """SIGINT while `marun run` waits (here for node 0's name): exit 130, nothing on stderr."""
    import signal
    import time

    from conftest import clean_env

    (tmp_path / "train.py").write_text("")
    env = clean_env(
        {"MA_NUM_HOSTS": "2", "MA_NUM_GPUS": "1", "VC_TASK_INDEX": "1",
         "MA_VJ_NAME": "job.invalid", "MA_TASK_NAME": "worker"}
    )  # fmt: skip
    argv = ["run", "--mode", "mindspore", "--nic", "lo", "--", "train.py"]
    ends = []
    for start in (["-m", "marun"], ["-c", "from marun.cli import main; main()"]):
        proc = subprocess.Popen(
            [sys.executable, *start, *argv], cwd=tmp_path, env=env, stderr=subprocess.PIPE
        )
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        ends.append((proc.returncode, err))
    assert ends[0] == ends[1] == (130, b"")
