"""The CLI's generic behaviour: mode choice, config layering, exit codes, no traceback."""

from __future__ import annotations

from pathlib import Path

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
