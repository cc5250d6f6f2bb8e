"""PyTorch end to end: two nodes on 127.0.0.1, each a real `marun run` under the torch venv, as
the platform's PyTorch-GPU engine starts them (node variables plus the appended `--init_method
--rank --world_size`), two processes per node, DDP over gloo on the CPU.

No GPU exists here: MA_NUM_GPUS=2 only sets the process count, gloo runs on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from local_cluster import LocalCluster, free_ports, rank_results

pytestmark = pytest.mark.e2e

NODES, DEVICES = 2, 2
DEADLINE = 180  # seconds; a hang guard only


def test_two_nodes_two_processes_each_train_in_step(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    with LocalCluster(tmp_path, "torch") as cluster:
        nodes = [
            cluster.start(
                f"node{n}",
                [
                    *("run", "--mode", "auto", "--", "examples/pytorch_ddp.py"),
                    *("--init_method", f"tcp://127.0.0.1:{port}"),
                    *("--rank", str(n), "--world_size", str(NODES)),
                ],
                {
                    "MA_NUM_HOSTS": str(NODES),
                    "MA_NUM_GPUS": str(DEVICES),
                    "VC_TASK_INDEX": str(n),
                    "MA_VJ_NAME": "e2e-torch",
                    "MA_TASK_NAME": "worker",
                },
            )
            for n in range(NODES)
        ]
        codes = [node.wait(DEADLINE) for node in nodes]
        assert codes == [0, 0], cluster.report()

        world = NODES * DEVICES
        results = rank_results("".join(node.logs() for node in nodes))
        assert sorted(results) == list(range(world)), cluster.report()
        for result in results.values():
            assert result.world == world
            assert result.total == result.expected == world * (world + 1) // 2
        checksums = {r.checksum for r in results.values()}
        assert len(checksums) == 1, f"ranks disagree on the trained weights: {results}"

        for n, node in enumerate(nodes):
            ranks = range(n * DEVICES, (n + 1) * DEVICES)
            # torchrun's log layout is not marun's: one file per rank, named by its global rank.
            for rank in ranks:
                log = node.log_dir / f"rank_{rank}.log"
                assert f"rank {rank}/{world}: all_reduce sum" in log.read_text(), log
            # Every rank's lines reach the console too, whole.
            console = rank_results(node.stdout)
            assert sorted(console) == list(ranks), node.report()
        cluster.assert_nothing_left()


def test_keep_platform_args_starts_a_spawn_style_file_once_per_node(tmp_path: Path) -> None:
    """Part 19, item 3: a file written for the platform's arguments, that spawns one process per
    GPU itself (examples/pytorch_spawn.py), under `--keep-platform-args` on 2 nodes with
    MA_NUM_GPUS=2: marun starts it once per node with the arguments unchanged, and the 4 ranks
    meet in one world of 4 (not a world of 1 and an EADDRINUSE)."""
    (port,) = free_ports(1)
    with LocalCluster(tmp_path, "torch") as cluster:
        nodes = [
            cluster.start(
                f"node{n}",
                [
                    *("run", "--keep-platform-args", "--", "examples/pytorch_spawn.py"),
                    *("--init_method", f"tcp://127.0.0.1:{port}"),
                    *("--rank", str(n), "--world_size", str(NODES)),
                ],
                {
                    "MA_NUM_HOSTS": str(NODES),
                    "MA_NUM_GPUS": str(DEVICES),
                    "VC_TASK_INDEX": str(n),
                    "MA_VJ_NAME": "e2e-torch-spawn",
                },
            )
            for n in range(NODES)
        ]
        codes = [node.wait(DEADLINE) for node in nodes]
        assert codes == [0, 0], cluster.report()
        world = NODES * DEVICES
        text = "".join(node.logs() + node.stdout for node in nodes)
        for rank in range(world):
            assert f"rank {rank}/{world}: all_reduce sum 10 (expected 10)" in text, cluster.report()
        for n, node in enumerate(nodes):
            # once per node: one log, named by the node
            assert sorted(p.name for p in node.log_dir.glob("*.log") if "events" not in p.name) == [
                f"node_{n}.log"
            ], cluster.report()
