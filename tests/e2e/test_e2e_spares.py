"""Hot spares with real PyTorch (issue: part 23): the platform starts 3 + 1 nodes, `--spares 1`;
the job trains on nodes 0-2 (2 ranks each, gloo on the CPU) and node 3 waits. At step 4 of
round 0 every rank pauses; node 1's pod is deleted (its marun and ranks SIGKILLed: its
connection closes without a goodbye). Node 0 finds it lost at once, round 1 begins, and node 3
takes node 1's place: its ranks are RANK 2 and 3 (node 1's), every rank resumes from rank 0's
checkpoint of step 3, and the job ends 0 with the losses of a run that never stopped.

Four `marun run` processes on 127.0.0.1 under the torch venv, with the platform's variables and
appended arguments, a checkpoint directory they share. No GPU exists here: MA_NUM_GPUS=2 only
sets the process count.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from local_cluster import LocalCluster, Node, free_ports
from test_e2e_restart import SCRIPTS, resume_math, step_losses

pytestmark = pytest.mark.e2e

PLACES, SPARES, DEVICES = 3, 1, 2
NODES, WORLD = PLACES + SPARES, PLACES * DEVICES
STEPS, PAUSE = 8, 4
DEADLINE = 180  # seconds; a hang guard only
NODE_VAR = "SPARES_TEST_NODE"  # each node's processes carry their node's name (the "pod")


def _pod(name: str) -> list[int]:
    """Every live process of one node (its marun and its ranks), as a pod's would be."""
    needle = f"{NODE_VAR}={name}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _delete_pod(name: str) -> None:
    for pid in _pod(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _wait_for(node: Node, rank: int, pattern: str) -> None:
    log = node.log_dir / f"rank_{rank}.log"
    deadline = time.monotonic() + DEADLINE
    while not (log.is_file() and re.search(pattern, log.read_text(errors="replace"), re.M)):
        assert time.monotonic() < deadline and node.proc.poll() is None, node.report()
        time.sleep(0.1)


def test_a_spare_takes_a_deleted_pod_s_place_and_the_job_resumes(tmp_path: Path) -> None:
    ckpt = tmp_path / "shared" / "ckpt"
    port, job_port = free_ports(2)
    script = str(SCRIPTS / "torch_resume.py")
    with LocalCluster(tmp_path, "torch") as cluster:
        nodes = [
            cluster.start(
                f"node{n}",
                [
                    *("run", "--mode", "pytorch", "--max-restarts", "2", "--spares", "1"),
                    *("--", script, "--ckpt-dir", str(ckpt), "--steps", str(STEPS)),
                    *("--pause-step", str(PAUSE)),
                    *("--init_method", f"tcp://127.0.0.1:{port}"),
                    *("--rank", str(n), "--world_size", str(NODES)),
                ],
                {
                    "MA_NUM_HOSTS": str(NODES),
                    "MA_NUM_GPUS": str(DEVICES),
                    "VC_TASK_INDEX": str(n),
                    "VC_WORKER_HOSTS": ",".join(["127.0.0.1"] * NODES),
                    "MA_VJ_NAME": "e2e-torch-spares",
                    "MA_TASK_NAME": "worker",
                    "MARUN_GRACE_PERIOD": "5",
                    "MARUN_JOB_PORT": str(job_port),
                    NODE_VAR: f"node{n}",
                },
            )
            for n in range(NODES)
        ]
        for rank in range(WORLD):
            _wait_for(nodes[rank // DEVICES], rank, rf"^rank {rank} paused at step {PAUSE}$")
        assert not nodes[3].log_dir.joinpath("rank_2.log").exists()  # the spare ran nothing
        _delete_pod("node1")
        codes = [node.wait(DEADLINE) for node in (nodes[0], nodes[2], nodes[3])]
        assert codes == [0, 0, 0], cluster.report()
        assert nodes[1].proc.wait(5) == -signal.SIGKILL
        cluster.assert_nothing_left()

    console = nodes[0].stdout + nodes[0].stderr
    assert re.search(
        r"marun: node 1 \(\S+\) lost \(its marun's connection closed.*\); spare node 3 "
        r"\(\S+\) takes its place in round 1",
        console,
    ), console
    assert re.search(rf"marun: round 1/2 after .*\(all {WORLD} ranks running again in", console)
    report = json.loads((nodes[0].log_dir / "job.json").read_text())
    assert report["exit_code"] == 0, report
    (round1,) = report["rounds"]
    assert [(s["place"], s["lost"], s["spare"]) for s in round1["substitutions"]] == [(1, 1, 3)]
    said = subprocess.run(
        [sys.executable, "-m", "marun", "report", str(nodes[0].log_dir)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert re.search(r"spare node 3 \(\S+\) took node 1's place \(\S+\), place 1", said), said

    # Node 1's ranks ran round 0 on node 1 and round 1 on node 3, with the same RANKs.
    expected = resume_math().reference_losses(WORLD, STEPS)
    holders = {0: nodes[0], 1: nodes[3], 2: nodes[2]}
    for rank in range(WORLD):
        text = (holders[rank // DEVICES].log_dir / f"rank_{rank}.log").read_text(errors="replace")
        if rank // DEVICES == 1:
            first = (nodes[1].log_dir / f"rank_{rank}.log").read_text(errors="replace")
            assert f"rank {rank} paused at step {PAUSE}" in first
            assert f"rank {rank} round 1 " in text and f"rank {rank} round 0 " not in text
        else:
            assert f"rank {rank} round 0 " in text and f"rank {rank} round 1 " in text
        assert f"rank {rank} resumed from step {PAUSE - 1} " in text, text[-2000:]
        losses = step_losses(text, rank)
        if rank // DEVICES == 1:
            losses.update(step_losses(first, rank))
        assert sorted(losses) == list(range(STEPS)), (rank, losses)
        for step, seen in losses.items():
            assert len(seen) == 1, (rank, step, seen)
            assert seen[0] == pytest.approx(expected[step], rel=1e-9), (rank, step, seen)
