"""Node 0's paced loop in combination (issue 33): 33 Ascend servers x 8 devices, 264 real `marun
run` processes, more than PACED_FROM, so node 0's loop takes a turn at most every PACE seconds
once every member runs (marun.job.coordinator). What the pacing must not change, tested at once:
- a pod deleted while the job runs (node 20's 8 maruns and their ranks SIGKILLed) and recreated
  with the same index (8 new maruns): node 0 finds the node lost, starts round 1, and the new
  maruns join it with every other rank, which node 0's console says once every node's `running`
  has reached it;
- the platform deleting the job while round 1 runs (SIGTERM to every marun at once): every marun
  exits 143, and no rank is left running.
How long the stop took is printed, not asserted (the deadline only catches a hang)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ascend_job import AscendJob, left_running

from marun.job.coordinator import PACED_FROM

SERVERS, DEVICES = 33, 8
RECREATED = 20  # the server whose pod is deleted and recreated
RANKS = 'up="$UP_DIR/round$MARUN_RESTART_COUNT"; mkdir -p "$up"; : > "$up/$RANK_ID"; exec sleep 600'


def test_a_recreated_pod_then_the_jobs_deletion_while_node_0_is_paced(tmp_path: Path) -> None:
    assert SERVERS * DEVICES > PACED_FROM  # else this job is not paced and tests nothing here
    up = tmp_path / "up"
    up.mkdir()
    job = AscendJob(tmp_path, SERVERS, DEVICES, env={"UP_DIR": str(up)})
    options = ("--max-restarts", "1")
    try:
        job.start(["sh", "-c", RANKS], options)
        job.wait_up(up / "round0")
        pod = range(RECREATED * DEVICES, (RECREATED + 1) * DEVICES)
        for rank in pod:  # the pod deleted: its maruns and their ranks, at once
            os.killpg(job.starts[rank].proc.pid, signal.SIGKILL)
        for rank in pod:
            job.starts[rank].proc.wait()
        job.start_server(RECREATED, ["sh", "-c", RANKS], options)
        job.wait_up(up / "round1")
        # Every rank's file is there once it runs; node 0 announces the round only when every
        # node's `running` has reached it, which on a loaded host comes seconds later: the job
        # is deleted after that, so the test does not race node 0's view of the round. Its cause
        # is either of two, both right: node 0 found the node lost (the old maruns' link closed)
        # before the new maruns' hellos, or (node 0 slow to turn, on a loaded host) the hellos
        # came first and the node's marun was replaced.
        job.wait_for_line(
            0,
            f"round 1/1 after node {RECREATED} ",
            f"round 1/1 after node {RECREATED}'s marun was replaced after the start",
        )
        assert all(s.proc.poll() is None for s in job.starts.values()), job.report()

        stopped = time.monotonic()
        for start in job.starts.values():  # the job deleted: every pod's marun, at once
            start.proc.send_signal(signal.SIGTERM)
        codes = job.finish()
        took = time.monotonic() - stopped
        assert codes == dict.fromkeys(range(job.size), 143), job.report()
        assert left_running(tmp_path) == []
        report = job.job_json()
        (round1,) = report["rounds"]  # type: ignore[misc]
        assert f"node {RECREATED}" in str(round1["cause"]), round1
        print(f"{job.size} maruns, paced: a pod recreated, round 1, all stopped in {took:.2f}s")
    finally:
        job.kill_all()
