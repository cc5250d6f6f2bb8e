"""The job's coordination beyond 3 nodes: 64 real `marun run` processes on loopback (PyTorch mode,
2 plain Python ranks each: 128 ranks), as the platform starts 64 containers (loopback_job.py).
One job fails fast (one rank exits 3: every marun exits 3 naming it), another finishes cleanly
(every marun exits 0). Both jobs run at the same time, each on its own job port, so the test
costs one job's wall time on a 2-core CI machine. How long the fail-fast took is printed, not
asserted (LoopbackJob's deadline only catches a hang).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from loopback_job import LoopbackJob

NODES = 64
FAILING_RANK = 77  # node 38's second rank

RANKS = """\
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} up", flush=True)
if rank == int(os.environ["FAILING_RANK"]):
    with open(os.environ["FAILED_AT"], "w") as fh:
        fh.write(repr(time.time()))
    sys.exit(3)
time.sleep(float(os.environ["RUN_FOR"]))
print(f"rank {rank} done", flush=True)
"""


def test_64_nodes_arrive_fail_fast_as_one_job_and_finish_cleanly(tmp_path: Path) -> None:
    failed_at = tmp_path / "failed_at"
    failing = LoopbackJob(
        tmp_path / "failing", nodes=NODES,
        env={"FAILING_RANK": str(FAILING_RANK), "FAILED_AT": str(failed_at), "RUN_FOR": "600"},
    )  # fmt: skip
    clean = LoopbackJob(
        tmp_path / "clean", nodes=NODES,
        env={"FAILING_RANK": "-1", "FAILED_AT": "-", "RUN_FOR": "0"},
    )  # fmt: skip
    began = time.monotonic()
    try:
        for job in (failing, clean):
            job.start(list(range(NODES)), RANKS)
        codes = failing.finish()
        ended = time.time()
        assert codes == dict.fromkeys(range(NODES), 3), failing.report()
        failed_node = FAILING_RANK // 2
        for i in range(NODES):
            out = failing.nodes[i].output
            assert re.search(
                rf"Job's first failure: node {failed_node} \(\S+\), process \S+ "
                rf"\(rank {FAILING_RANK}[^)]*\), exit code 3",
                out,
            ), f"node {i}:\n{out[-3000:]}"
        assert f"marun: {NODES}/{NODES} nodes up" in failing.nodes[0].output
        report = json.loads(failing.job_json())
        assert report["exit_code"] == 3 and report["first_failure"]["node"] == failed_node
        print(
            f"64 nodes: rank {FAILING_RANK} exited 3; the last of the 64 marun exited "
            f"{ended - float(failed_at.read_text()):.2f}s later (an upper bound: read after each "
            f"exit, on this machine's cores shared by 64 marun and 128 ranks of two jobs)"
        )

        assert clean.finish() == dict.fromkeys(range(NODES), 0), clean.report()
        assert f"marun: {NODES}/{NODES} nodes up" in clean.nodes[0].output
        for i in range(NODES):
            assert f"rank {2 * i + 1} done" in clean.nodes[i].output, clean.report()
        report = json.loads(clean.job_json())
        assert report["exit_code"] == 0 and report["first_failure"] is None
        assert all(s["outcome"] == "succeeded" for n in report["nodes"] for s in n["slots"])
        print(f"64 nodes x 2 jobs: {time.monotonic() - began:.1f}s in all")
    finally:
        failing.kill_all()
        clean.kill_all()
