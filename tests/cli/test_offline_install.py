"""marun in a preset engine's container (part 19, item 11): an image without marun, a container
without a package index. `scripts/wheelhouse.sh` puts marun and its dependencies as wheels into
`marun-wheels/` in the code directory; the start file, run by a Python that cannot import marun,
installs it from there with `pip --no-index` (no index configured, no network: a network
namespace of its own where this test may make one) and runs the job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env

pytestmark = pytest.mark.e2e


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload,no-any-return]


def test_a_start_file_installs_marun_offline_from_the_code_directory(tmp_path: Path) -> None:
    image = tmp_path / "image"  # the engine's Python: no marun
    made = _run([sys.executable, "-m", "venv", str(image)], timeout=300)
    assert made.returncode == 0, made.stderr
    python = image / "bin" / "python"
    assert _run([str(python), "-c", "import marun"]).returncode != 0

    code = tmp_path / "code"  # the code directory the platform mounts
    code.mkdir()
    wheels = _run(
        ["bash", str(REPO / "scripts" / "wheelhouse.sh"), str(code / "marun-wheels")],
        env={**os.environ, "PYTHON": str(python)},
        timeout=600,
    )
    assert wheels.returncode == 0, wheels.stdout + wheels.stderr
    shutil.copy(REPO / "entrypoints" / "pytorch-gpu", code / "pytorch-gpu")
    (code / "train.py").write_text("import os\nprint('trained rank', os.environ['RANK'])\n")

    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(
        {"HOME": str(home), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "MA_NUM_GPUS": "2"}
    )
    env.pop("PYTHONPATH", None)
    offline: list[str] = []
    if os.geteuid() == 0 and shutil.which("unshare"):
        offline = ["unshare", "--net"]  # no network at all
    argv = [*offline, str(python), str(code / "pytorch-gpu"), "train.py"]
    start = [*argv, "--init_method", "tcp://127.0.0.1:29561"]
    res = _run(start, env=env, cwd=code, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(line for line in res.stdout.splitlines() if "trained" in line) == [
        "[0:0] trained rank 0",
        "[0:1] trained rank 1",
    ], res.stdout
    site = home / ".cache" / "marun" / f"site-{sys.version_info[0]}.{sys.version_info[1]}"
    assert (site / "marun").is_dir()
    # a second start in the same container finds it there: no second install
    again = _run(start, env=env, cwd=code, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [p.name for p in site.parent.iterdir()] == [site.name]
