"""marun inside a preset engine's container (part 19, item 11): the engine's framework image,
which has no marun, a code directory holding the start file, the user's script and
`marun-wheels/` (scripts/wheelhouse.sh), and no network at all (`--network=none`: loopback only,
so no package index). The start file, run by the image's Python as the platform runs it
(`python <start file> <script> <appended arguments>`, uid 1000), installs marun from the wheels
with `pip --no-index` and runs the job in its mode; a second start in the same container finds
it installed.

The images are `scripts/images.sh base`'s: the stand-in framework base of docker/*/Dockerfile
(a Debian 12 rootfs, a venv Python at /opt/python first on PATH, as a framework image's conda
or venv Python is) under each Dockerfile's default BASE_IMAGE name, so the test runs the very
name the engine's image is built from. Real frameworks are not in it (no registry here); the
start files do not need one. Needs root (rootful podman), as tests/e2e/test_images.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_images import (
    BUILD_TIMEOUT,
    ENGINES,
    EXAMPLES,
    IMAGES_SH,
    RANKTABLES,
    START_FILES,
    Engine,
    Podman,
    why_not,
)

from conftest import REPO

pytestmark = pytest.mark.e2e

CODE = "/home/ma-user/modelarts/user-job-dir/code"  # where the platform puts the code directory
PYTHON = "/opt/python/bin/python"  # the stand-in framework image's Python (scripts/images.sh)

# In the container: the image has no marun; the start file twice (the second finds the first's
# install); what ~/.cache/marun then holds; the network interfaces there are.
STARTS = """\
set -u
python -c 'import marun' 2>/dev/null && echo "IMAGE HAS MARUN"
echo "PYTHON $(command -v python)"
for n in 1 2; do
    python "$@"
    echo "START $n EXIT $?"
done
echo "CACHE $(ls "$HOME/.cache/marun" | tr '\\n' ' ' | sed 's/ $//')"
echo "INTERFACES $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')"
"""


def framework_image(engine: Engine) -> str:
    """The image docker/<engine>/Dockerfile is built FROM by default: the preset engine's."""
    for line in (REPO / "docker" / engine.image / "Dockerfile").read_text().splitlines():
        if line.startswith("ARG BASE_IMAGE="):
            return line.split("=", 1)[1].strip()
    raise AssertionError(f"docker/{engine.image}/Dockerfile names no BASE_IMAGE")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """marun-wheels/ for the images' Python (3.11: Debian 12's), made as a user makes it."""
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    base = subprocess.run(
        ["bash", str(IMAGES_SH), "base"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert base.returncode == 0, f"scripts/images.sh base failed:\n{base.stderr[-4000:]}"
    out = tmp_path_factory.mktemp("wheelhouse") / "marun-wheels"
    made = subprocess.run(
        ["bash", str(REPO / "scripts" / "wheelhouse.sh"), str(out), "3.11"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return out


@pytest.fixture
def podman() -> Iterator[Podman]:
    pm = Podman()
    try:
        yield pm
    finally:
        pm.remove_all()


# MPI's start file needs mpirun, which a framework image without MPI lacks (the preset MPI
# engines start it through their own mpirun: entrypoints/README.md).
@pytest.mark.parametrize(
    "engine", [e for e in ENGINES if e.mode != "mpi"], ids=lambda e: e.start_file
)
def test_a_start_file_installs_marun_offline_in_the_engine_s_image(
    tmp_path: Path, wheels: Path, podman: Podman, engine: Engine
) -> None:
    code = tmp_path / "code"  # the user's code directory: start file, script, wheels
    code.mkdir()
    shutil.copy(START_FILES / engine.start_file, code / engine.start_file)
    shutil.copy(EXAMPLES / "hello.py", code / "hello.py")
    shutil.copytree(wheels, code / "marun-wheels")
    (code / "starts.sh").write_text(STARTS)
    tmp_path.chmod(0o755)
    for path in (code, *code.rglob("*")):
        os.chown(path, 1000, 100)  # the container's ma-user owns it, as on the platform

    env = {
        **engine.env,
        **engine.start_file_env,
        "MARUN_JOB_PORT": "0",  # one node of the job, alone
        "HOME": "/tmp/ma-user",  # the stand-in has no ma-user; any HOME it may write
    }
    status, out = podman.run(
        framework_image(engine),
        ["sh", f"{CODE}/starts.sh", engine.start_file, "hello.py", *engine.appended],
        env=env,
        volumes={code: CODE, RANKTABLES: "/ranktables:ro"},
        options=("--network=none", "--user", "1000:100", "--workdir", CODE),
    )
    assert status == 0, out
    assert "IMAGE HAS MARUN" not in out  # the image is one without marun
    assert f"PYTHON {PYTHON}" in out, out  # the framework's Python runs the start file
    # No network, loopback only: nothing to install from but the wheels.
    assert "INTERFACES lo " in out.splitlines(), out
    for n in (1, 2):
        assert f"START {n} EXIT 0\n" in out, out
    # Each start ran the job in the mode's shape (hello.py's line has the mode's variables).
    first, second = out.split("START 1 EXIT 0\n", 1)
    assert engine.expect in first, out
    assert engine.expect in second.split("START 2 EXIT 0\n", 1)[0], out
    # One install, in the Python's own directory, served both starts.
    assert "CACHE site-3.11" in out.splitlines(), out
