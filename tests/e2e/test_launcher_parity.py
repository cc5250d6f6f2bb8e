"""marun's processes against the frameworks' own launchers (part 19, item 7), two processes on
this machine each: PyTorch's torchrun in the torch venv, MindSpore's msrun in the mindspore venv
(`bash scripts/frameworks.sh torch mindspore`).

PyTorch (`--standalone` both):
- the variables torchrun gives its workers are all there under marun, by name; what marun adds
  beyond them is the list docs/engines/pytorch.md gives;
- a rank that fails under torch's `@record` has its exception (type, message, traceback) in
  marun's failure summary, read from its TORCHELASTIC_ERROR_FILE.
MindSpore: every variable msrun's scheduler and workers get is there under marun, by name, but
the three that `import mindspore` sets in msrun's own process (its children inherit them; under
marun the script's own `import mindspore` sets them in the process itself)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, clean_env, free_port

pytestmark = pytest.mark.e2e

VENV = REPO / ".cache" / "venvs" / "torch"
PYTHON = VENV / "bin" / "python"
MS_VENV = REPO / ".cache" / "venvs" / "mindspore"
# What `import mindspore` sets in the importing process (msrun's, so its children inherit them).
MS_IMPORT_SETS = {
    "HCCL_CONNECT_TIMEOUT",
    "LD_LIBRARY_PATH",
    "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION",
}
# What marun sets beyond torchrun's names: the node rank as PyTorchJob sets it, the interfaces
# for gloo/NCCL, and marun's own restart-round variables (with --max-restarts only).
MARUN_EXTRA = {"NODE_RANK", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}

ENV_DUMP = """
import json, os, sys
before = set(json.loads(os.environ["PARITY_PARENT_NAMES"]))
added = sorted(set(os.environ) - before)
who = os.environ.get("RANK") or os.environ.get("MS_ROLE", "") + os.environ.get("RANK_ID", "")
out = os.path.join(os.environ["PARITY_OUT"], f"{who}.{sys.argv[1]}.json")
with open(out, "w") as f:
    json.dump({name: os.environ[name] for name in added}, f)
"""

RECORD = """
import os
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("bad batch 17 on purpose")

main()
"""


def _need_torch() -> None:
    if not PYTHON.is_file():
        pytest.skip(".cache/venvs/torch not made: run bash scripts/frameworks.sh torch")


def _env(tmp_path: Path) -> dict[str, str]:
    env = clean_env({"PYTHONPATH": str(REPO / "src"), "PARITY_OUT": str(tmp_path)})
    env.pop("OMP_NUM_THREADS", None)
    env.pop("TORCH_NCCL_ASYNC_ERROR_HANDLING", None)
    # Names the launcher's own process already has: what a worker sees beyond them is the
    # launcher's doing (PARITY_PARENT_NAMES itself included in both).
    env["PARITY_PARENT_NAMES"] = json.dumps(sorted([*env, "PARITY_PARENT_NAMES"]))
    return env


def test_marun_gives_every_variable_torchrun_gives(tmp_path: Path) -> None:
    _need_torch()
    script = tmp_path / "dump.py"
    script.write_text(ENV_DUMP)
    env = _env(tmp_path)
    torchrun = subprocess.run(
        [
            *(str(PYTHON), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"),
            *("2", str(script), "torchrun"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert torchrun.returncode == 0, torchrun.stderr[-3000:]
    marun = subprocess.run(
        [
            *(str(PYTHON), "-m", "marun", "run", "--standalone", "--nproc-per-node", "2"),
            *("--log-dir", str(tmp_path / "logs"), "--", str(script), "marun"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert marun.returncode == 0, marun.stderr[-3000:]
    for rank in (0, 1):
        theirs = json.loads((tmp_path / f"{rank}.torchrun.json").read_text())
        ours = json.loads((tmp_path / f"{rank}.marun.json").read_text())
        assert set(theirs) - set(ours) == set(), (sorted(theirs), sorted(ours))
        assert set(ours) - set(theirs) <= MARUN_EXTRA, sorted(set(ours) - set(theirs))
        for name in (
            "TORCH_NCCL_ASYNC_ERROR_HANDLING",
            "TORCHELASTIC_SIGNALS_TO_HANDLE",
            "OMP_NUM_THREADS",
        ):
            assert ours[name] == theirs[name], name
        # torchrun's agent serves the store its workers join (True); under marun rank 0 serves it
        assert ours["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        assert ours["TORCHELASTIC_ERROR_FILE"].endswith(f"rank_{rank}.error.json")


def test_a_record_decorated_rank_s_exception_is_in_the_failure_summary(tmp_path: Path) -> None:
    _need_torch()
    script = tmp_path / "fails.py"
    script.write_text(RECORD)
    logs = tmp_path / "logs"
    res = subprocess.run(
        [
            *(str(PYTHON), "-m", "marun", "run", "--standalone", "--nproc-per-node", "2"),
            *("--log-dir", str(logs), "--", str(script)),
        ],
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert res.returncode == 1, res.stderr[-3000:]
    summary = res.stderr[res.stderr.index("marun: the job failed") :]
    assert f"its exception (from {logs}/rank_1.error.json, written by torch's @record):" in summary
    assert "\n    ValueError: bad batch 17 on purpose\n" in summary
    assert "  traceback:" in summary and 'fails.py", line' in summary
    assert os.path.isfile(logs / "rank_1.error.json")


def test_marun_gives_every_variable_msrun_gives(tmp_path: Path) -> None:
    python = MS_VENV / "bin" / "python"
    if not python.is_file():
        pytest.skip(".cache/venvs/mindspore not made: run bash scripts/frameworks.sh mindspore")
    script = tmp_path / "dump.py"
    script.write_text(ENV_DUMP)
    env = _env(tmp_path)
    port = str(free_port())
    msrun = subprocess.run(
        [
            *(str(python), "-m", "mindspore.parallel.cluster.run", "--worker_num", "2"),
            *("--local_worker_num", "2", "--master_port", port, "--log_dir", str(tmp_path / "ms")),
            *("--join", "True", str(script), "msrun"),
        ],
        # msrun starts a bare `python` from PATH: the venv's, as in a framework's image
        env={**env, "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert msrun.returncode == 0, msrun.stdout[-3000:] + msrun.stderr[-3000:]
    marun = subprocess.run(
        [
            *(str(python), "-m", "marun", "run", "--mode", "mindspore", "--nproc-per-node", "2"),
            *("--log-dir", str(tmp_path / "logs"), "--", str(script), "marun"),
        ],
        env={
            **env,
            "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
            "MARUN_MS_SCHED_PORT": port,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert marun.returncode == 0, marun.stderr[-3000:]
    for who in ("MS_SCHED0", "MS_WORKER0", "MS_WORKER1"):
        theirs = json.loads((tmp_path / f"{who}.msrun.json").read_text())
        ours = json.loads((tmp_path / f"{who}.marun.json").read_text())
        assert set(theirs) - set(ours) - MS_IMPORT_SETS == set(), (sorted(theirs), sorted(ours))
        for name in set(theirs) - MS_IMPORT_SETS:
            assert ours[name] == theirs[name], name
