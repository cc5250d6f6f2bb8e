"""Every example every help page prints (`marun --help`, `marun COMMAND --help`) runs as written:
in a fresh working directory holding a trivial `train.py` (and the repository's `examples/`), with
no platform variable set. `marun` is this tree's, on PATH through a small shim; an example whose
script needs a framework (examples/tf_ps.py: TensorFlow) runs with that framework's venv
(`bash scripts/frameworks.sh tensorflow`).

"Runs" means the command ends 0; `marun doctor` may end 1 (a failed check is its report, not a
refusal of its input), never 2."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env

pytestmark = pytest.mark.e2e

PAGES = ([], ["plan"], ["run"], ["simulate"], ["doctor"])
# an example's script -> the framework venv its ranks need
NEEDS_VENV = {"examples/tf_ps.py": "tensorflow"}


def _examples(page: list[str]) -> list[str]:
    """The shell lines under `Examples:` of one help page, continuations joined, comments out."""
    res = subprocess.run(
        [sys.executable, "-m", "marun", *page, "--help"],
        env=clean_env({"COLUMNS": "80", "PYTHONPATH": str(REPO / "src")}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines, pending = [], ""
    for raw in res.stdout.split("Examples:", 1)[1].splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        lines.append(pending + line)
        pending = ""
    assert lines, f"marun {' '.join(page)} --help shows no example"
    return lines


EXAMPLES = [(page, line) for page in PAGES for line in _examples(list(page))]


def test_every_page_has_examples_and_the_first_ones_need_no_platform() -> None:
    assert len(EXAMPLES) >= 10
    first = next(line for page, line in EXAMPLES if not page)
    assert "--init_method" not in first and "MA_" not in first


@pytest.mark.parametrize(("page", "line"), EXAMPLES, ids=[line for _, line in EXAMPLES])
def test_every_help_example_runs_as_written(page: list[str], line: str, tmp_path: Path) -> None:
    python = sys.executable
    for script, venv in NEEDS_VENV.items():
        if script in line:
            python = str(REPO / ".cache" / "venvs" / venv / "bin" / "python")
            if not os.path.isfile(python):
                pytest.skip(f".cache/venvs/{venv} not made: run bash scripts/frameworks.sh {venv}")
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shim = shim_dir / "marun"
    shim.write_text(f'#!/bin/sh\nexec {python} -m marun "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("import sys\nprint('train.py', sys.argv[1:])\n")
    (work / "examples").symlink_to(REPO / "examples")
    env = clean_env(
        {
            "PATH": f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(REPO / "src"),
            "MARUN_LOG_DIR": str(tmp_path / "logs"),
        }
    )
    res = subprocess.run(
        ["bash", "-c", line],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    allowed = {0, 1} if line.startswith("marun doctor") else {0}
    assert res.returncode in allowed, (res.returncode, res.stdout[-3000:], res.stderr[-3000:])
    assert "marun: error" not in res.stderr, res.stderr
