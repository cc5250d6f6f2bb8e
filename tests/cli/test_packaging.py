"""`pip install .` gives a working `marun` from a wheel (not the source tree): the console
script, `python -m marun`, and the templates shipped inside the package."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, clean_env


@pytest.mark.e2e
def test_wheel_installs_a_working_marun(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if build.returncode != 0:
        pytest.skip(f"cannot build a wheel here (needs hatchling from PyPI): {build.stderr[-300:]}")
    (wheel,) = wheels.glob("marun-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "marun/mpi/templates/sshd_config" in names
    assert "marun/command/cli.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    # marun.command.entry: `marun run` parsed without typer; anything else: marun.command.cli.
    assert "marun = marun.command.entry:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    install = subprocess.run(
        [str(env_dir / "bin" / "pip"), "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('ok')\n")
    env = clean_env({"MA_NUM_GPUS": "2", "MARUN_RUN_DIR": str(tmp_path / "run")})
    env.pop("PYTHONPATH", None)  # the installed wheel, not a checkout on the path
    for argv in (
        [str(env_dir / "bin" / "marun"), "version"],
        [str(env_dir / "bin" / "python"), "-m", "marun", "version"],
    ):
        res = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        assert res.returncode == 0 and res.stdout.strip(), res.stderr
    # The MPI plan renders sshd_config from the template inside the installed package.
    res = subprocess.run(
        [
            str(env_dir / "bin" / "marun"),
            "plan",
            "--mode",
            "mpi",
            "--format",
            "json",
            "--",
            "train.py",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert "PasswordAuthentication no" in res.stdout
    assert str(REPO) not in res.stdout  # nothing read from the source checkout
