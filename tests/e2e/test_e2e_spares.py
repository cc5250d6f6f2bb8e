"""Hot spares with real PyTorch and MindSpore (issue: part 23). PyTorch: the platform starts
3 + 1 nodes, `--spares 1`; the job trains on nodes 0-2 (2 ranks each, gloo on the CPU) and node 3
waits. At step 4 of round 0 every rank pauses; node 1's pod is deleted (its marun and ranks
SIGKILLed: its connection closes without a goodbye). Node 0 finds it lost at once, round 1
begins, and node 3 takes node 1's place: its ranks are RANK 2 and 3 (node 1's), every rank
resumes from rank 0's checkpoint of step 3, and the job ends 0 with the losses of a run that
never stopped. MindSpore: the last test.

Each node is a `marun run` process on 127.0.0.1 under the framework's venv, with the platform's
variables and appended arguments, a checkpoint directory they share. No GPU exists here:
MA_NUM_GPUS=2 only sets the process count.
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


# -- MindSpore ------------------------------------------------------------------------------------

MS_PLACES, MS_STEPS, MS_CRASH, MS_PAUSE = 2, 8, (3, 5), 6
MS_WORLD = MS_PLACES * DEVICES


def _wait_for_ms(node: Node, rank: int, pattern: str) -> None:
    log = node.log_dir / f"worker_{rank}.log"  # msrun's log names, by global rank
    deadline = time.monotonic() + DEADLINE
    while not (log.is_file() and re.search(pattern, log.read_text(errors="replace"), re.M)):
        assert time.monotonic() < deadline and node.proc.poll() is None, node.report()
        time.sleep(0.1)


def test_mindspore_a_crash_round_then_a_spare_takes_a_deleted_pod_s_place(tmp_path: Path) -> None:
    """Real MindSpore on the CPU, a dynamic cluster of 2 places + 1 spare (node 0 runs the
    scheduler too). Round 0: worker 3 exits 1 at step 5; round 1 starts the scheduler and every
    worker again (MS_SCHED_PORT moved; the spare still waits) and each reloads worker 0's
    checkpoint of step 4. At step 6 of round 1 node 1's pod is deleted: in round 2 node 2 takes
    place 1 (its workers are MS_NODE_ID/RANK_ID 2 and 3, node 1's) and every worker resumes from
    step 5. The job ends 0 with the losses of a run that never stopped."""
    ckpt = tmp_path / "shared" / "ckpt"
    sched_port, job_port = free_ports(2)
    script = str(SCRIPTS / "ms_resume.py")
    nodes_n = MS_PLACES + SPARES
    with LocalCluster(tmp_path, "mindspore") as cluster:
        nodes = [
            cluster.start(
                f"node{n}",
                [
                    *("run", "--mode", "mindspore", "--max-restarts", "2", "--spares", "1"),
                    *("--", script, "--ckpt-dir", str(ckpt), "--steps", str(MS_STEPS)),
                    *("--crash-rank", str(MS_CRASH[0]), "--crash-step", str(MS_CRASH[1])),
                    *("--pause-round", "1", "--pause-step", str(MS_PAUSE)),
                ],
                {
                    "MA_NUM_HOSTS": str(nodes_n),
                    "MA_NUM_GPUS": str(DEVICES),
                    "VC_TASK_INDEX": str(n),
                    "VC_WORKER_HOSTS": ",".join(["127.0.0.1"] * nodes_n),
                    "MA_VJ_NAME": "e2e-ms-spares",
                    "MA_TASK_NAME": "worker",
                    "MARUN_MS_SCHED_PORT": str(sched_port),
                    "MARUN_MS_TOPO_TIMEOUT": "60",
                    "MARUN_GRACE_PERIOD": "5",
                    "MARUN_JOB_PORT": str(job_port),
                    NODE_VAR: f"ms-node{n}",
                },
            )
            for n in range(nodes_n)
        ]
        for rank in range(MS_WORLD):
            _wait_for_ms(nodes[rank // DEVICES], rank, rf"^rank {rank} paused at step {MS_PAUSE}$")
        assert not list(nodes[2].log_dir.glob("worker_*.log"))  # the spare ran nothing yet
        _delete_pod("ms-node1")
        codes = [node.wait(DEADLINE) for node in (nodes[0], nodes[2])]
        assert codes == [0, 0], cluster.report()
        assert nodes[1].proc.wait(5) == -signal.SIGKILL
        cluster.assert_nothing_left()

    console = nodes[0].stdout + nodes[0].stderr
    assert re.search(r"marun: round 1/2 after .*rank 3", console), console
    assert re.search(
        r"marun: node 1 \(\S+\) lost \(its marun's connection closed.*\); spare node 2 "
        r"\(\S+\) takes its place in round 2",
        console,
    ), console
    report = json.loads((nodes[0].log_dir / "job.json").read_text())
    assert report["exit_code"] == 0, report
    first, second = report["rounds"]
    assert not first.get("substitutions")  # the crash's round: nobody lost
    assert [(s["place"], s["lost"], s["spare"]) for s in second["substitutions"]] == [(1, 1, 2)]
    expected = resume_math().reference_losses(MS_WORLD, MS_STEPS)
    sched_ports = set()
    for rank in range(MS_WORLD):
        mine = nodes[0] if rank < DEVICES else nodes[1]
        text = (mine.log_dir / f"worker_{rank}.log").read_text(errors="replace")
        if rank >= DEVICES:  # place 1: rounds 0 and 1 on node 1, round 2 on the spare
            later = (nodes[2].log_dir / f"worker_{rank}.log").read_text(errors="replace")
            assert f"rank {rank} round 2 " in later and f"rank {rank} round 1 " not in later
            text += later
        starts = re.findall(
            rf"^rank {rank} round (\d+) MARUN_MAX_RESTARTS=\S+ MS_SCHED_PORT=(\d+)$", text, re.M
        )
        assert [s[0] for s in starts] == ["0", "1", "2"], starts
        sched_ports.update(starts)
        assert f"rank {rank} resumed from step {MS_CRASH[1] - 1} " in text, text[-2000:]
        assert f"rank {rank} resumed from step {MS_PAUSE - 1} " in text, text[-2000:]
        final = re.search(rf"^rank {rank} final loss (\S+)$", text, re.M)
        assert final and float(final[1]) == pytest.approx(expected[-1], rel=1e-4), text[-2000:]
        losses = step_losses(text, rank)
        assert sorted(losses) == list(range(MS_STEPS)), (rank, losses)
        for step, seen in losses.items():
            assert len(seen) == 1, (rank, step, seen)
            # float32 on MindSpore's side, doubles in the reference
            assert seen[0] == pytest.approx(expected[step], rel=1e-4), (rank, step, seen)
    by_round = {k: {p for r, p in sched_ports if r == k} for k in ("0", "1", "2")}
    assert all(len(p) == 1 for p in by_round.values()), sched_ports
    assert len(set().union(*by_round.values())) == 3, sched_ports  # the port moved each round


# -- TensorFlow -----------------------------------------------------------------------------------

# A cluster of workers alone (MultiWorkerMirroredStrategy), each worker on its own loopback
# address: each says the cluster its TF_CONFIG lists and all-reduces its index + 1; in round 0 it
# then waits to be stopped.
TF_WORKER = """\
import json, os, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
round_ = os.environ["MARUN_RESTART_COUNT"]
config = json.loads(os.environ["TF_CONFIG"])
index = config["task"]["index"]
print(f"worker {index} round {round_} cluster {','.join(config['cluster']['worker'])}", flush=True)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(float(index + 1))), axis=None)
print(f"worker {index} round {round_} sum {float(total):g}", flush=True)
if round_ == "0":
    time.sleep(600)
"""


def _wait_for_tf(node: Node, pattern: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not re.search(pattern, node.stdout, re.M):
        assert time.monotonic() < deadline and node.proc.poll() is None, node.report()
        time.sleep(0.1)


def test_tensorflow_a_spare_takes_a_deleted_pod_s_place_in_every_tf_config(tmp_path: Path) -> None:
    """Real TensorFlow (CPU), MultiWorkerMirroredStrategy: 2 places + 1 spare, worker i on
    127.0.0.(i+1). Round 0 all-reduces over workers 0-1; node 1's pod is deleted; in round 1 the
    spare (127.0.0.3) is worker 1 on place 1's port, and every worker's TF_CONFIG (node 0's too)
    lists it there: the all-reduce of round 1 sums both workers again."""
    (tmp_path / "worker.py").write_text(TF_WORKER)
    nodes_n, places = 3, 2
    *tf_ports, job_port = free_ports(nodes_n + 1)
    hosts = [f"127.0.0.{n + 1}" for n in range(nodes_n)]
    workers = ",".join(f"{h}:{p}" for h, p in zip(hosts, tf_ports))
    with LocalCluster(tmp_path, "tensorflow") as cluster:
        nodes = [
            cluster.start(
                f"tf-node{n}",
                [
                    *("run", "--mode", "tensorflow", "--max-restarts", "2", "--spares", "1"),
                    *("--", str(tmp_path / "worker.py")),
                    *("--task_index", str(n), "--worker_hosts", workers, "--job_name", "worker"),
                ],
                {
                    "MA_NUM_HOSTS": str(nodes_n),
                    "VC_TASK_INDEX": str(n),
                    "MA_VJ_NAME": "e2e-tf-spares",
                    "MA_TASK_NAME": "worker",
                    "MARUN_GRACE_PERIOD": "5",
                    "MARUN_JOB_PORT": str(job_port),
                    NODE_VAR: f"tf-node{n}",
                },
            )
            for n in range(nodes_n)
        ]
        for n in range(places):
            _wait_for_tf(nodes[n], rf"worker {n} round 0 sum 3$")
        assert "round 0" not in nodes[2].stdout  # the spare ran nothing
        _delete_pod("tf-node1")
        codes = [node.wait(DEADLINE) for node in (nodes[0], nodes[2])]
        assert codes == [0, 0], cluster.report()
        assert nodes[1].proc.wait(5) == -signal.SIGKILL
        cluster.assert_nothing_left()

    round_1 = f"{hosts[0]}:{tf_ports[0]},{hosts[2]}:{tf_ports[1]}"  # the spare on place 1's port
    for node, index in ((nodes[0], 0), (nodes[2], 1)):
        out = node.stdout
        assert re.search(rf"worker {index} round 1 cluster {round_1}$", out, re.M), out
        assert re.search(rf"worker {index} round 1 sum 3$", out, re.M), out
    console = nodes[0].stdout + nodes[0].stderr
    said = r"marun: node 1 \(127\.0\.0\.2\) lost .*; spare node 2 \(127\.0\.0\.3\) takes"
    assert re.search(said, console), console
    report = json.loads((nodes[0].log_dir / "job.json").read_text())
    (round1,) = report["rounds"]
    assert [(s["place"], s["lost"], s["spare"]) for s in round1["substitutions"]] == [(1, 1, 2)]
