"""Restart rounds with real frameworks (issue 20): a job that checkpoints every step, one rank of
which crashes in round 0, heals in place under `marun run --max-restarts` and ends 0 with the
loss of a run that never crashed.

Two nodes on 127.0.0.1, each a real `marun run` under the framework's venv with the platform's
variables; a checkpoint directory both nodes share (as a job's shared storage). The model, data
and reference losses are tests/scripts/resume_math.py's: the loss each step must have, computed
here in plain Python. No GPU or NPU exists here: MA_NUM_GPUS=2 only sets the process count.
MindSpore's crash round is in tests/e2e/test_e2e_spares.py, in combination with a hot spare that
takes a deleted pod's place in the round after it.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from local_cluster import LocalCluster, Node, free_ports

from conftest import REPO

pytestmark = pytest.mark.e2e

SCRIPTS = REPO / "tests" / "scripts"
NODES, DEVICES = 2, 2
WORLD = NODES * DEVICES
STEPS, CRASH_RANK, CRASH_STEP = 8, 3, 5
DEADLINE = 180  # seconds; a hang guard only


def resume_math() -> ModuleType:
    spec = importlib.util.spec_from_file_location("resume_math", SCRIPTS / "resume_math.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_losses(text: str, rank: int) -> dict[int, list[float]]:
    """Every `rank R step S loss L` line of one rank: step -> the losses printed (one a round)."""
    found: dict[int, list[float]] = {}
    for m in re.finditer(rf"^rank {rank} step (\d+) loss (\S+)$", text, re.M):
        found.setdefault(int(m[1]), []).append(float(m[2]))
    return found


def job_json(node0: Node) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((node0.log_dir / "job.json").read_text())
    return data


def assert_one_round_after_rank_3(nodes: list[Node], world: str, logs: dict[int, str]) -> None:
    """What every mode's job says of its one round: node 0's console line (`world`: a pattern
    for the count of processes running again), each rank's log (both rounds, the marker between
    them), job.json's `rounds`."""
    console = nodes[0].stdout + nodes[0].stderr
    line = re.search(
        rf"marun: round 1/2 after node 1 rank {CRASH_RANK} exit 1 "
        rf"\(all {world} ranks running again in [0-9.]+s\)",
        console,
    )
    assert line, nodes[0].report()
    for rank, text in logs.items():
        assert re.search(r"^marun: round 1/2 after ", text, re.M), (rank, text[-2000:])
        assert "round 0 " in text.split("marun: round 1/2")[0], (rank, text[-2000:])
    report = job_json(nodes[0])
    assert report["exit_code"] == 0, report
    rounds = report["rounds"]
    assert [r["round"] for r in rounds] == [1], report
    cause = rounds[0]["cause"]
    assert (cause["node"], cause["rank"], cause["exit_code"]) == (1, CRASH_RANK, 1), rounds
    assert cause.get("signal") is None, rounds
    detected, stopped, running = (rounds[0][k] for k in ("detected_at", "stopped_at", "running_at"))
    assert detected <= stopped <= running, rounds


# -- PyTorch --------------------------------------------------------------------------------------


def test_pytorch_rank_crash_resumes_from_checkpoint(tmp_path: Path) -> None:
    """Rank 3 (node 1) exits 1 at step 5 of round 0; round 1 starts every rank again with
    MARUN_RESTART_COUNT=1 (and torchrun's variables, and MASTER_PORT moved), each resumes from
    rank 0's checkpoint of step 4, and the job ends 0 with the uncrashed run's losses."""
    ckpt = tmp_path / "shared" / "ckpt"
    (port,) = free_ports(1)
    script = str(SCRIPTS / "torch_resume.py")
    with LocalCluster(tmp_path, "torch") as cluster:
        nodes = [
            cluster.start(
                f"node{n}",
                [
                    *("run", "--mode", "pytorch", "--max-restarts", "2", "--", script),
                    *("--ckpt-dir", str(ckpt), "--steps", str(STEPS)),
                    *("--crash-rank", str(CRASH_RANK), "--crash-step", str(CRASH_STEP)),
                    *("--init_method", f"tcp://127.0.0.1:{port}"),
                    *("--rank", str(n), "--world_size", str(NODES)),
                ],
                {
                    "MA_NUM_HOSTS": str(NODES),
                    "MA_NUM_GPUS": str(DEVICES),
                    "VC_TASK_INDEX": str(n),
                    "VC_WORKER_HOSTS": ",".join(["127.0.0.1"] * NODES),
                    "MA_VJ_NAME": "e2e-torch-restart",
                    "MA_TASK_NAME": "worker",
                    "MARUN_GRACE_PERIOD": "5",
                },
            )
            for n in range(NODES)
        ]
        codes = [node.wait(DEADLINE) for node in nodes]
        assert codes == [0, 0], cluster.report()
        cluster.assert_nothing_left()

    logs = {
        rank: (nodes[rank // DEVICES].log_dir / f"rank_{rank}.log").read_text(errors="replace")
        for rank in range(WORLD)
    }
    assert f"rank {CRASH_RANK} crashes at step {CRASH_STEP}" in logs[CRASH_RANK]
    expected = resume_math().reference_losses(WORLD, STEPS)
    ports = set()
    for rank, text in logs.items():
        starts = re.findall(
            rf"^rank {rank} round (\d+) MARUN_MAX_RESTARTS=(\S+) TORCHELASTIC_RESTART_COUNT=(\S+)"
            rf" TORCHELASTIC_MAX_RESTARTS=(\S+) MASTER_PORT=(\d+)$",
            text,
            re.M,
        )
        assert [s[:4] for s in starts] == [("0", "2", "0", "2"), ("1", "2", "1", "2")], starts
        ports.update((int(s[0]), s[4]) for s in starts)
        assert f"rank {rank} resumed from step {CRASH_STEP - 1} " in text, text[-2000:]
        losses = step_losses(text, rank)
        # Steps 0-4 once (round 0), 5-7 once (round 1, after the checkpoint of step 4).
        assert sorted(losses) == list(range(STEPS)), losses
        for step, seen in losses.items():
            assert len(seen) == 1, (rank, step, seen)
            assert seen[0] == pytest.approx(expected[step], rel=1e-9), (rank, step, seen)
        final = re.search(rf"^rank {rank} final loss (\S+) checksum (\S+)$", text, re.M)
        assert final and float(final[1]) == pytest.approx(expected[-1], rel=1e-9), text[-2000:]
    # Round 1's rendezvous port is another than round 0's, the same on every rank.
    by_round = {k: {p for r, p in ports if r == k} for k in (0, 1)}
    assert len(by_round[0]) == len(by_round[1]) == 1 and by_round[0] != by_round[1], ports
    assert_one_round_after_rank_3(nodes, str(WORLD), logs)
