"""`marun simulate --mode mpi`: a whole MPI job on simulated hosts (one network namespace per
node, marun as PID 1 on each, sshd, cluster formation, mpirun), with mpi4py for real."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from local_cluster import EXAMPLES, framework_python

from conftest import clean_env
from marun.sim.netns import NAME_PREFIX, available

pytestmark = pytest.mark.e2e


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in out.stdout.splitlines() if line.startswith(NAME_PREFIX)}


def _left_behind(before: set[str]) -> set[str]:
    """Simulated hosts that outlived their creator: a namespace's name starts with its creator's
    pid (`mrn<pid>_...`). Another test process's live cluster on this machine is not ours."""
    left = set()
    for name in _namespaces() - before:
        match = re.match(rf"{NAME_PREFIX}(\d+)_", name)
        if match is None or not Path(f"/proc/{match.group(1)}").exists():
            left.add(name)
    return left


def _simulate(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`marun simulate --mode mpi OPTIONS -- mpi_allreduce.py` under the mpi4py venv."""
    reason = available()
    if reason:
        pytest.skip(reason)
    python = framework_python("mpi")
    script = tmp_path / "mpi_allreduce.py"
    script.write_text((EXAMPLES / "mpi_allreduce.py").read_text())
    return subprocess.run(
        [str(python), "-m", "marun", "simulate", "--mode", "mpi", *options, "--", script.name],
        capture_output=True,
        text=True,
        env=clean_env({"PATH": f"{python.parent}:{clean_env()['PATH']}"}),
        cwd=tmp_path,
        timeout=180,
        check=False,
    )


def test_mpi_allreduce_on_three_simulated_hosts(tmp_path: Path) -> None:
    before = _namespaces()
    res = _simulate(tmp_path, "--nodes", "3", "--devices", "2", "--grace-period", "10")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    ranks = re.findall(r"rank (\d)/6 on (\S+): allreduce sum 21 \(expected 21\)", res.stdout)
    assert sorted(int(r) for r, _ in ranks) == list(range(6))
    assert len({host for _, host in ranks}) == 3
    assert "3/3 hosts ready" in res.stdout
    # The plan first, as in the other modes (planned on host 0: its own addresses).
    # sshd on every node, mpi-leader on node 0 (the other nodes are daemons only)
    assert res.stdout.startswith("mode: mpi   nodes: 3   processes: 4\n"), res.stdout[:2000]
    assert "console_ranks leader" in res.stdout.splitlines()[1]
    # sshd's chatter (every login and disconnect) is in its log, not on the console; nor are
    # marun's own events on a clean run.
    out = res.stdout + res.stderr
    for noise in ("Accepted publickey", "[preauth]", "Received signal 15", "orphans_reaped"):
        assert noise not in out, out[-4000:]
    started = [
        line
        for line in (tmp_path / "marun_logs" / "simulate" / "marun-events.log")
        .read_text()
        .splitlines()
        if "process_started" in line
    ]
    assert len(started) == 3 and all(ln.count("'--console-ranks'") == 1 for ln in started), started
    assert _left_behind(before) == set()  # every simulated host torn down
    left = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert left.stdout.strip() == ""


def test_mpi_with_a_spare_ends_with_mpirun_and_the_spare_hears_it(tmp_path: Path) -> None:
    """3 simulated hosts, `--spares 1`: mpirun runs on hosts 0-1, host 2 waits with nothing
    started; when mpirun is done, host 1's sshd and the waiting spare end with it (exit 0)."""
    before = _namespaces()
    res = _simulate(
        tmp_path,
        *("--nodes", "3", "--devices", "1", "--max-restarts", "1", "--spares", "1"),
        "--no-show-plan",
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    ranks = re.findall(r"rank (\d)/2 on (\S+): allreduce sum 3 \(expected 3\)", res.stdout)
    assert sorted(ranks) == [("0", "marun-sim-worker-0"), ("1", "marun-sim-worker-1")], out
    assert "node 2 ran nothing (no place); it ends with 0" in out
    assert "could not find environment variable" not in out  # (mpirun forwards what is set)
    assert _left_behind(before) == set()
