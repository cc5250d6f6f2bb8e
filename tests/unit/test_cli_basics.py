"""The CLI's generic behaviour: mode choice, config layering, exit codes, no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import run_marun


def test_version() -> None:
    res = run_marun(["version"])
    assert res.returncode == 0
    assert res.stdout.strip()


def test_auto_mode_without_hints_is_bad_input(script: Path) -> None:
    res = run_marun(["plan", "--", script.name], cwd=script.parent)
    assert res.returncode == 2
    assert "--mode" in res.stderr
    assert "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1


def test_version_option_and_command_agree() -> None:
    from marun import __version__

    for args in (["--version"], ["version"]):
        res = run_marun(args)
        assert (res.returncode, res.stdout) == (0, __version__ + "\n")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # Number options are read by marun's own parser, as the same settings from a file are.
        (["plan", "--nproc-per-node", "x"], "--nproc-per-node='x': expected an integer from 1"),
        (["run", "--grace-period", "soon"], "--grace-period='soon': expected a number of seconds"),
        (["nosuch"], "No such command 'nosuch'"),
        (["plan", "--format", "xml"], "Invalid value for '--format'"),
        (["run", "--mode"], "Option '--mode' requires an argument"),
        (["plan", "--nproc-per-node", "\x1b[31m"], "'\\x1b[31m'"),
        # A mistyped option is named, with the nearest one, instead of being taken for the
        # script; on both paths of `marun run` (the typer-free one hands it to typer's).
        (
            ["plan", "--nproc", "2", "--", "train.py"],
            "unknown option --nproc for `marun plan` (did you mean --nproc-per-node?)",
        ),
        (["run", "--nproc", "2", "--", "train.py"], "(did you mean --nproc-per-node?)"),
        (["run", "--log-dir", "x", "--hang=5", "t.py"], "(did you mean --hang-timeout?)"),
        (["simulate", "--node", "2", "t.py"], "unknown option --node for `marun simulate`"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(args: list[str], expected: str) -> None:
    """The parser's refusals look like marun's own: one line, no box, exit 2."""
    res = run_marun(args)
    assert res.returncode == 2
    assert res.stderr.startswith("marun: error: ")
    assert res.stderr.count("\n") == 1, res.stderr
    assert expected in res.stderr
    assert "\x1b" not in res.stderr


def test_help_through_a_pipe_shows_whole_option_names() -> None:
    res = run_marun(["run", "--help"])
    assert res.returncode == 0
    assert "--keep-platform-args" in res.stdout
    assert re.search(r"--nproc-per-node +N ", res.stdout), res.stdout


@pytest.mark.parametrize("command", ["plan", "run", "simulate", "doctor"])
def test_every_help_page_fits_80_columns_and_shows_an_example(command: str) -> None:
    """Plain help (no rich boxes): no word cut at the edge, `[hang]` kept, an example each."""
    res = run_marun([command, "--help"], env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    assert max(len(line) for line in res.stdout.splitlines()) <= 80, res.stdout
    assert "Examples:" in res.stdout and f"marun {command}" in res.stdout.split("Examples:")[1]
    if command != "doctor":
        assert "stacks need marun[hang]" in res.stdout or command == "simulate", res.stdout
        assert "<auto|ascend|mindspore|pytorch|tensorflow|mpi>" in res.stdout or (
            command == "simulate"
        )


def test_a_nodes_plan_says_which_node_of_how_many(script: Path) -> None:
    """`marun plan` on node 1 of a 2-node job shows node 1's plan: its header names it as such
    (not `nodes: 1`), and its record file is node 1's."""
    res = run_marun(
        [
            *("plan", "--format", "table", "--mode", "pytorch", "--", script.name),
            *("--init_method", "tcp://127.0.0.1:29500", "--rank", "1", "--world_size", "2"),
        ],
        env={"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1"},
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("mode: pytorch   node 1 of 2   processes: 1")
    assert lines[1].endswith("marun supervises")
    assert re.match(r"records: \S+/result\.node1\.json   events: \S+/marun-events\.log$", lines[2])


# Part 19, item 9: what a torchrun or msrun user reaches for.
@pytest.mark.parametrize("command", [[], ["plan"], ["run"], ["simulate"], ["doctor"]])
def test_dash_h_is_help(command: list[str]) -> None:
    res = run_marun([*command, "-h"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: marun")


def test_dash_capital_v_is_the_version() -> None:
    from marun import __version__

    res = run_marun(["-V"])
    assert (res.returncode, res.stdout) == (0, __version__ + "\n")


def test_metavars_say_what_they_want_and_completion_is_offered() -> None:
    page = run_marun(["run", "--help"], env={"COLUMNS": "200"}).stdout
    for option, metavar in (
        ("--config", "FILE"),
        ("--log-dir", "DIR"),
        ("--nic", "NIC"),
        ("--console-ranks", "RANKS"),
        ("--master-addr", "HOST"),
    ):
        assert re.search(rf"{option} {metavar}\b", page), option
    assert "<str>" not in page and "TEXT" not in page
    assert "-m MODULE" in page
    assert "--install-completion" in run_marun(["--help"]).stdout
    simulate = run_marun(["simulate", "--help"], env={"COLUMNS": "200"}).stdout
    assert "--devices, --nproc-per-node N" in simulate


@pytest.mark.parametrize("form", [["-m", "pkg.train"], ["--", "-m", "pkg.train"]])
@pytest.mark.parametrize("command", ["plan", "run"])
def test_dash_m_module_as_python_and_torchrun_take_it(
    command: str, form: list[str], tmp_path: Path
) -> None:
    """`marun run --standalone -m pkg.train ARGS`: each rank is `python -m pkg.train ARGS`."""
    import json
    import sys

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("print('hi')\n")
    res = run_marun(["plan", "--format", "json", "--standalone", *form, "--lr", "1"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    argv = json.loads(res.stdout)["nodes"][0]["processes"][0]["argv"]
    assert argv == [sys.executable, "-m", "pkg.train", "--lr", "1"]
    if command == "run":
        from conftest import WOULD_START

        res = run_marun(["run", "--standalone", *form, "--lr", "1"], cwd=tmp_path)
        assert res.returncode == WOULD_START, res.stderr
    bad = run_marun([command, "--standalone", "-m"], cwd=tmp_path)
    assert bad.returncode == 2 and "-m=''" in bad.stderr, bad.stderr


@pytest.mark.parametrize(
    ("ranks", "note"),
    [
        ("5", "console_ranks 5: no process of this node (ranks 0-1) has it"),
        ("0,7-9,scheduler", "console_ranks 7-9,scheduler: no process of this node"),
        ("0-3", None),
        ("all", None),
    ],
)
def test_console_ranks_naming_no_process_here_gets_a_note(
    ranks: str, note: str | None, script: Path
) -> None:
    import json

    res = run_marun(
        [
            *("plan", "--format", "json", "--standalone", "--nproc-per-node", "2"),
            *("--console-ranks", ranks, "--", script.name),
        ],
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    notes = [n for n in json.loads(res.stdout)["notes"] if n.startswith("console_ranks")]
    assert notes == ([] if note is None else [notes[0]])
    if note is not None:
        assert notes[0].startswith(note), notes
        assert ("shows no process's output" in notes[0]) == (ranks == "5")
