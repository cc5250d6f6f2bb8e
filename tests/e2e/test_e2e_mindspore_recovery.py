"""MindSpore recovery across nodes, for real: a two-node MindSpore CPU dynamic cluster with
`MS_ENABLE_RECOVERY=1` and one `MS_RECOVERY_PATH` shared by both nodes (as MindSpore requires).
The scheduler (node 0) and worker 1 (node 1) are SIGKILLed mid-training. marun restarts each with
the same MS_NODE_ID and recovery path; the surviving worker's AllReduce then fails (MindSpore's
CPU collectives do not survive a peer's death) and marun restarts it too; the cluster forms
again under the new scheduler and every node ends with 0. The restarts are in result.json.

The restarted workers start the script over (this script keeps no checkpoint: resuming training
state is the script's part of MindSpore recovery, with its checkpoints); what is tested is marun's
part: who is restarted, as whom, and what the record says.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from local_cluster import LocalCluster, Node, free_ports

pytestmark = pytest.mark.e2e

SCRIPT = str(Path(__file__).resolve().parents[1] / "scripts" / "ms_recovery_train.py")
DEADLINE = 150  # seconds; a hang guard only
RUN = ["run", "--mode", "mindspore", "--", SCRIPT, "--steps", "6"]


def recovery_env(node: int, port: int, shared: Path) -> dict[str, str]:
    return {
        "MA_NUM_HOSTS": "2",
        "MA_NUM_GPUS": "1",
        "VC_TASK_INDEX": str(node),
        "VC_WORKER_HOSTS": "127.0.0.1,127.0.0.1",
        "MARUN_MS_SCHED_PORT": str(port),
        "MARUN_MS_TOPO_TIMEOUT": "30",
        "MS_ENABLE_RECOVERY": "1",
        "MS_RECOVERY_PATH": str(shared),
        "MARUN_RECOVERY_WAIT": "2",
        "MARUN_RECOVERY_RESTARTS": "2",
        "MARUN_GRACE_PERIOD": "3",
        "MARUN_LOG_LEVEL": "info",  # marun's events on the console too: the pids are read there
    }


def started_pid(node: Node, name: str) -> int:
    for line in node.stderr.splitlines():
        if "process_started" in line and f"process={name} " in line:
            return int(re.search(r"\bpid=(\d+)", line)[1])  # type: ignore[index]
    raise AssertionError(f"{node.name}: {name} not started\n{node.report()}")


def test_scheduler_and_worker_killed_are_restarted_as_themselves(tmp_path: Path) -> None:
    shared = tmp_path / "recovery"  # both "nodes" see the same directory
    (port,) = free_ports(1)
    with LocalCluster(tmp_path, "mindspore") as cluster:
        nodes = [cluster.start(f"node{n}", RUN, recovery_env(n, port, shared)) for n in (0, 1)]
        deadline = time.monotonic() + 60
        while "step 1 " not in "".join(n.logs() for n in nodes):
            assert time.monotonic() < deadline, cluster.report()
            assert all(n.proc.poll() is None for n in nodes), cluster.report()
            time.sleep(0.2)
        killed = {
            "scheduler": started_pid(nodes[0], "scheduler"),
            "worker1": started_pid(nodes[1], "worker1"),
        }
        os.kill(killed["scheduler"], signal.SIGKILL)
        os.kill(killed["worker1"], signal.SIGKILL)
        codes = [node.wait(DEADLINE) for node in nodes]
        assert codes == [0, 0], cluster.report()
        cluster.assert_nothing_left()

    names = ("result.json", "result.node1.json")  # one log directory per node here, named anyway
    records = [json.loads((n.log_dir / name).read_text()) for n, name in zip(nodes, names)]
    procs = {p["name"]: p for r in records for p in r["processes"]}
    for name, pid in killed.items():
        assert procs[name]["pids"][0] == pid
        assert procs[name]["restarts"] >= 1 and len(procs[name]["pids"]) >= 2, procs[name]
        assert procs[name]["exit_code"] == 0
    assert all(r["outcome"] == "succeeded" and r["exit_code"] == 0 for r in records)

    # Every start of a process came back as itself, with the shared recovery path.
    expected_ids = {"scheduler": "sched", "worker0": "0", "worker1": "1"}
    logs = {"scheduler": nodes[0], "worker0": nodes[0], "worker1": nodes[1]}
    for name, node_id in expected_ids.items():
        log_name = "scheduler.log" if name == "scheduler" else f"worker_{name[-1]}.log"
        text = (logs[name].log_dir / log_name).read_text(errors="replace")
        starts = re.findall(r"^start role=\S+ MS_NODE_ID=(\S+) MS_RECOVERY_PATH=(\S+)", text, re.M)
        assert len(starts) == len(procs[name]["pids"]), (name, starts)
        assert set(starts) == {(node_id, str(shared))}, (name, starts)
    for rank in (0, 1):
        text = "".join(n.logs() for n in nodes)
        assert f"rank {rank} done" in text
