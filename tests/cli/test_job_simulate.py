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
         "--", "ranks.py", str(last)],
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
