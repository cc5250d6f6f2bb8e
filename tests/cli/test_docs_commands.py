"""Every command the documentation gives runs as written, from the repository's root, on this
machine: each logical line of every ```bash block of README.md, README.zh-CN.md, docs/**/*.md
(docs/zh/ included), docker/README.md,
entrypoints/README.md, bench/README.md and examples/**/*.md, and each command in the examples'
docstrings (an indented line starting with `marun ` or `.cache/venvs/`). `marun` is the one
`pip install .` gives: this tree's, installed into the interpreter running the tests
(scripts/bootstrap.sh's .venv, `pip install -e .`). Commands through a framework's venv
(`.cache/venvs/<name>/bin/marun`) need it made first (`bash scripts/frameworks.sh <name>`, which
scripts/test.sh runs before this lane). Logs go to a temporary directory (MARUN_LOG_DIR), not
into the tree.

Only the commands in SKIPPED do not run here, each with its reason. What it costs (figures,
not asserted): about 45 s in all on 2 busy cores, most of it the three framework simulations
(MindSpore 20 s, TensorFlow 8 s, PyTorch 7 s).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env

pytestmark = pytest.mark.e2e

DOCS = sorted(
    [
        REPO / "README.md",
        REPO / "README.zh-CN.md",
        *(REPO / "docs").rglob("*.md"),  # docs/zh/ too
        REPO / "docker" / "README.md",
        REPO / "entrypoints" / "README.md",
        REPO / "bench" / "README.md",
        *(REPO / "examples").rglob("*.md"),
    ]
)
EXAMPLES = sorted((REPO / "examples").glob("*.py"))

# command (as written, comment stripped) -> why it does not run here
SKIPPED = {
    "bash scripts/test.sh": "the whole test suite, which runs this test (most of an hour)",
    "pip install .": (
        "installs marun into the interpreter that runs it: the commands after it run with this "
        "tree's marun installed into the test's interpreter by scripts/bootstrap.sh (pip "
        "install -e .); tests/cli/test_packaging.py installs the wheel into a fresh venv"
    ),
    "scripts/images.sh context /tmp/ctx 3.9": (
        "an image build context for another Python: images need root, podman and minutes; "
        "tests/e2e/test_images.py builds and runs them (scripts/images.sh)"
    ),
    # examples/volcano/README.md: a Kubernetes cluster with Volcano (a cluster: none here)
    "kubectl create configmap marun-examples --from-file=examples/": "needs a Kubernetes cluster",
    "kubectl apply -f examples/volcano/pytorch.yaml": "needs a Kubernetes cluster with Volcano",
    "kubectl logs -f marun-pytorch-worker-0": "needs a Kubernetes cluster with Volcano",
    "vcctl job list": "needs a Kubernetes cluster with Volcano",
    "docker build -f /tmp/ctx/docker/pytorch/Dockerfile --build-arg BASE_IMAGE=... "
    "-t my/marun-pytorch /tmp/ctx": (
        "no Docker engine (nor a registry for BASE_IMAGE) on this machine: "
        "tests/e2e/test_images.py builds the same Dockerfiles with podman"
    ),
}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(line index, shell line) with backslash continuations joined, comments and blank lines
    dropped."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for index, raw in enumerate(text.splitlines()):
        line = raw.rstrip()
        if not pending:
            start = index
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line = (pending + line.strip()).strip()
        pending = ""
        line = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing comment (` # ...`)
        if line and not line.startswith("#"):
            lines.append((start, re.sub(r"\s+", " ", line)))
    return lines


def doc_commands() -> list[tuple[str, str]]:
    """(file:line, command) for every command the docs give, in order, each once."""
    found: dict[str, str] = {}
    for path in DOCS:
        text = path.read_text()
        for block in re.finditer(r"^```(?:bash|sh|shell)\n(.*?)^```", text, re.S | re.M):
            first = text[: block.start()].count("\n") + 2
            for index, command in _logical_lines(block.group(1)):
                found.setdefault(command, f"{path.relative_to(REPO)}:{first + index}")
    for path in EXAMPLES:
        text = path.read_text()
        doc = re.match(r'\s*"""(.*?)"""', text, re.S)
        assert doc, f"{path}: expected a module docstring"
        lines = doc.group(1).splitlines()
        indented = "\n".join(ln if ln.startswith("    ") else "" for ln in lines)
        for index, command in _logical_lines(indented):
            if command.startswith(("marun ", ".cache/venvs/")):
                found.setdefault(command, f"{path.relative_to(REPO)}:{index + 1}")
    return [(where, command) for command, where in found.items()]


COMMANDS = doc_commands()


def test_every_command_is_found_and_every_skip_is_still_in_the_docs() -> None:
    commands = {c for _, c in COMMANDS}
    assert len(commands) >= 12, commands
    assert set(SKIPPED) <= commands, set(SKIPPED) - commands
    # Commands a fresh machine lacks: root's Debian has no sudo, and marun is the CLI.
    for where, command in COMMANDS:
        assert not command.startswith("sudo "), (where, command)


def _venv_needed(command: str) -> str | None:
    match = re.search(r"\.cache/venvs/(\w+)/", command)
    return match.group(1) if match else None


# The commands in SKIPPED are not test cases at all (a skipped e2e test fails under
# MARUN_REQUIRE_E2E=1, as CI sets it): the test above keeps that list true to the docs.
RUN_HERE = [(where, command) for where, command in COMMANDS if command not in SKIPPED]


@pytest.mark.parametrize(("where", "command"), RUN_HERE, ids=[w for w, _ in RUN_HERE])
def test_the_command_runs_as_written(where: str, command: str, tmp_path: Path) -> None:
    venv = _venv_needed(command)
    if venv and not (REPO / ".cache" / "venvs" / venv / ".marun-frameworks-stamp").is_file():
        pytest.skip(f".cache/venvs/{venv} not made: run bash scripts/frameworks.sh {venv}")
    if "--mode mpi" in command and "simulate" in command:
        from marun.sim.netns import available

        reason = available()
        if reason:
            pytest.skip(f"simulated MPI hosts are network namespaces: {reason}")
    # `marun` as `pip install .` puts it on PATH; only it: the test interpreter's python3 first
    # on PATH would make scripts/frameworks.sh see another base interpreter and rebuild.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "marun").symlink_to(Path(sys.executable).parent / "marun")
    env = clean_env(
        {"PATH": f"{bindir}:{os.environ['PATH']}", "MARUN_LOG_DIR": str(tmp_path / "logs")}
    )
    res = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"{where}: {command}\n{out[-4000:]}"
    assert "Traceback" not in out, f"{where}: {command}\n{out[-4000:]}"
