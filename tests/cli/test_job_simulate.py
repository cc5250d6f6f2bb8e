"""Every mode's arrival check and job-wide fail-fast, through `marun simulate` (one `marun run`
per container on this machine; plain scripts, no framework: the modes only set variables)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import run_marun

# The last rank (or the last TF worker) fails with 5; every other one would wait for ever.
SCRIPT = """\
import json, os, sys, time
rank = int(os.environ.get("RANK", os.environ.get("RANK_ID", "-1")))
if "TF_CONFIG" in os.environ:
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    rank = task["index"] if task["type"] == "worker" else -1
print(f"rank {rank} up", flush=True)
if rank == int(sys.argv[1]):
    sys.exit(5)
time.sleep(120)
"""


@pytest.mark.parametrize(
    ("mode", "last", "containers"),
    [("pytorch", 3, 2), ("mindspore", 3, 2), ("ascend", 3, 2), ("tensorflow", 1, 4)],
)
def test_every_mode_arrives_together_and_fails_as_one_job(
    tmp_path: Path, mode: str, last: int, containers: int
) -> None:
    (tmp_path / "ranks.py").write_text(SCRIPT)
    res = run_marun(
        ["simulate", "--mode", mode, "--nodes", "2", "--devices", "2", "--grace-period", "5",
         "--full-plan", "--", "ranks.py", str(last)],
        cwd=tmp_path,
        timeout=90,
    )  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 5, out
    line = next(x for x in res.stdout.splitlines() if x.startswith("coordination:"))
    assert f"{containers if mode == 'tensorflow' else 2} nodes" in line, line
    n = containers if mode == "tensorflow" else 2
    assert f"marun: {n}/{n} nodes up" in out, out
    # Every container's marun names the job's first failure; on this one console, node 0's
    # alone prints its last lines (once), and the simulation adds one line.
    firsts = re.findall(r"^Job's first failure: node \d+ \(\S+\), process \S+( \(rank [^)]*\))?, "
                        r"exit code 5", out, re.M)  # fmt: skip
    assert len(firsts) == (containers if mode != "ascend" else 4), out
    assert out.count("last lines of its output:") == 1, out
    assert re.search(r"^marun simulate: the job failed, exit code 5 ", out, re.M), out


def test_simulate_shows_a_job_of_64_nodes(tmp_path: Path) -> None:
    """64 containers (one device each): they arrive, one rank's failure stops all 64, each
    naming it; the plan shows node 0 and the last in full and a line for each between, and
    node 0 counts the nodes up in tenths, not a line per node."""
    (tmp_path / "ranks.py").write_text(SCRIPT)
    res = run_marun(
        ["simulate", "--mode", "pytorch", "--nodes", "64", "--devices", "1", "--grace-period",
         "5", "--full-plan", "--", "ranks.py", "40"],
        cwd=tmp_path,
        timeout=120,
    )  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 5, out[-5000:]
    assert "nodes 1 to 62: as node 0, each with its own ranks" in res.stdout, out[-5000:]
    assert re.search(r"^  node 40  \S+: rank40 \(rank 40\)$", res.stdout, re.M), out[-5000:]
    ups = re.findall(r"^marun: (\d+)/64 nodes up$", out, re.M)
    assert ups[-1] == "64" and len(ups) <= 16, ups
    firsts = re.findall(r"^Job's first failure: node 40 \(\S+\), process rank40 \(rank 40\), "
                        r"exit code 5", out, re.M)  # fmt: skip
    assert len(firsts) == 64, out[-5000:]
    assert re.search(r"^marun simulate: the job failed, exit code 5 ", out, re.M), out[-5000:]
