"""MindSpore end to end: a two-node dynamic cluster from the platform's variables, each node a
real `marun run --mode mindspore` under the MindSpore venv, on the CPU over 127.0.0.1.

No Ascend NPU or GPU exists here: MA_NUM_GPUS=2 only sets the worker count per node. Both "nodes"
share this machine's host name, which MindSpore's CPU backend tolerates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from local_cluster import LocalCluster, free_ports, rank_results

pytestmark = pytest.mark.e2e

NODES, DEVICES = 2, 2
DEADLINE = 300  # seconds; a hang guard only (five MindSpore processes share two cores)


def platform_env(node: int, sched_port: int) -> dict[str, str]:
    return {
        "MA_NUM_HOSTS": str(NODES),
        "MA_NUM_GPUS": str(DEVICES),
        "VC_TASK_INDEX": str(node),
        "VC_WORKER_HOSTS": ",".join(["127.0.0.1"] * NODES),
        "MA_VJ_NAME": "e2e-ms",
        "MA_TASK_NAME": "worker",
        "MARUN_MS_SCHED_PORT": str(sched_port),
    }


RUN = ["run", "--mode", "mindspore", "--", "examples/mindspore_cluster.py", "--steps", "3"]


def test_two_node_dynamic_cluster_trains(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    with LocalCluster(tmp_path, "mindspore") as cluster:
        nodes = [cluster.start(f"node{n}", RUN, platform_env(n, port)) for n in range(NODES)]
        codes = [node.wait(DEADLINE) for node in nodes]
        assert codes == [0, 0], cluster.report()

        world = NODES * DEVICES
        logs = "".join(node.logs() for node in nodes)
        results = rank_results(logs)
        assert sorted(results) == list(range(world)), cluster.report()
        for result in results.values():
            assert result.world == world
            assert result.total == result.expected == world * (world + 1) // 2
        checksums = {r.checksum for r in results.values()}
        assert len(checksums) == 1, f"workers disagree on the trained weights: {results}"
        for rank in range(world):
            assert f"rank {rank} step 2 loss" in logs, f"rank {rank} did not train"

        # msrun's log names: the scheduler on node 0, worker_<rank>.log by global rank.
        expected_logs = [
            {"scheduler.log", "worker_0.log", "worker_1.log"},
            {"worker_2.log", "worker_3.log"},
        ]
        for node, names in zip(nodes, expected_logs):
            found = {p.name for p in node.log_dir.glob("*.log")}
            assert names <= found, f"{node.name}: logs {sorted(found)}"
            assert "scheduler.log" not in found or node is nodes[0]
        cluster.assert_nothing_left()


def test_missing_node_fails_fast_and_leaves_nothing(tmp_path: Path) -> None:
    """Node 1 never starts: with small MS_TOPO_TIMEOUT/MS_NODE_TIMEOUT, node 0's scheduler and
    workers give up within seconds instead of MindSpore's default of half an hour, and marun
    fails with the job's status, ending every process it started."""
    (port,) = free_ports(1)
    # MindSpore's own time-outs are under test: marun's arrival check (which would stop the
    # job before anything starts, tests/e2e/test_job.py) is off.
    env = {
        **platform_env(0, port),
        "MARUN_MS_TOPO_TIMEOUT": "5",
        "MS_NODE_TIMEOUT": "5",
        "MARUN_JOB_PORT": "0",
    }
    with LocalCluster(tmp_path, "mindspore") as cluster:
        node = cluster.start("node0", RUN, {**env, "MARUN_GRACE_PERIOD": "5"})
        code = node.wait(DEADLINE)
        assert code not in (0, 2), f"expected the job's failure, got {code}\n{node.report()}"
        cluster.assert_nothing_left()
    # The record says the same as the exit code (issue 3: `<log_dir>/result.json`).
    result = json.loads((node.log_dir / "result.json").read_text())
    assert result["exit_code"] == code
    assert result["first_failure"]["name"] in {"scheduler", "worker0", "worker1"}
