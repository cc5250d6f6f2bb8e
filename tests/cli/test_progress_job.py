"""The job's progress on the wire (part 21): real `marun run` nodes on loopback
(tests/cli/loopback_job.py), 3 nodes x 2 ranks, each rank printing `step N` as a training loop
does. Every node's marun reads its ranks' steps from their output and sends them with its
heartbeats; node 0 prints the job's status line, keeps job.json's `progress`, and judges a job
whose steps stand still while its ranks print on as hung (exit 124), with the steps as the
reason. Nothing is asserted on a time but the limits of the promise itself."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from loopback_job import LoopbackJob

from conftest import clean_env

# STEPS steps, one every PACE seconds; from STICK on, the step stands still and the rank keeps
# printing a line a second (a loss that is logged while nothing moves: a deadlocked loader).
RANKS = """\
import os, time
rank = int(os.environ["RANK"])
steps, pace = int(os.environ.get("STEPS", "8")), float(os.environ.get("PACE", "0.5"))
stick = int(os.environ.get("STICK", "0"))
for step in range(1, steps + 1):
    if stick and step > stick:
        while True:
            print(f"rank {rank} waiting at step {stick}", flush=True)
            time.sleep(1.0)
    print(f"step {step}/{steps} loss {1.0 / step:.3f}", flush=True)
    time.sleep(pace)
print(f"rank {rank} done", flush=True)
"""


def test_the_job_s_progress_is_printed_and_kept_in_job_json(tmp_path: Path) -> None:
    job = LoopbackJob(tmp_path, nodes=3)
    try:
        job.start([0, 1, 2], RANKS, {"STEPS": "10", "PACE": "0.6"})
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 0, 1: 0, 2: 0}, job.report()
    lines = re.findall(r"marun: step [\d,]+ of 10\b.*", job.nodes[0].output)
    assert lines, job.report()  # node 0's status line, from the nodes' heartbeats
    progress = json.loads(job.job_json())["progress"]
    assert progress["total"] == 10 and progress["unit"] == "steps", progress
    assert sorted(r["rank"] for r in progress["ranks"]) == list(range(6)), progress
    assert all(r["step"] >= 5 for r in progress["ranks"]), progress
    shown = subprocess.run(
        [sys.executable, "-m", "marun", "report", str(job.work(0) / "marun_logs")],
        capture_output=True, text=True, check=True, env=clean_env(),
    ).stdout  # fmt: skip
    assert re.search(r"^progress: step \d+ of 10", shown, re.M), shown


def test_steps_that_stand_still_while_the_ranks_print_are_a_hang(tmp_path: Path) -> None:
    job = LoopbackJob(tmp_path, nodes=3, env={"MARUN_PROGRESS_TIMEOUT": "4"})
    try:
        job.start([0, 1, 2], RANKS, {"STEPS": "100", "PACE": "0.3", "STICK": "3"})
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == {0: 124, 1: 124, 2: 124}, job.report()
    for node in range(3):
        out = job.nodes[node].output
        assert "the steps have not advanced for 4s" in out, job.report()
    report = json.loads(job.job_json())
    assert "--progress-timeout" in report["first_failure"]["why"], report
    assert report["progress"]["step"] == 3, report["progress"]
