"""The CLI's generic behaviour: mode choice, config layering, exit codes, no traceback."""

from __future__ import annotations

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
