"""Ascend's platform runs the start file once per device. Modes that start a whole node's
processes from one run (mindspore from the node variables; either mode with --per-node) plan them
on device 0's run only: the other runs plan nothing, instead of N schedulers on one port and
N x N workers. MindSpore from a rank table plans each start's own rank instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import DATA, run_marun

TABLE = DATA / "ranktables" / "server_list_2x8.json"


@pytest.mark.parametrize(
    ("options", "env"),
    [
        (["--mode", "mindspore"], {"MA_NUM_GPUS": "8", "MA_CURRENT_IP": "127.0.0.1"}),
        (["--mode", "ascend", "--per-node"], {"RANK_TABLE_FILE": str(TABLE), "RANK_ID": "0"}),
    ],
    ids=["mindspore", "ascend-per-node"],
)
def test_only_device_0_plans_the_node(
    script: Path, options: list[str], env: dict[str, str]
) -> None:
    counts = {}
    for device in ("0", "5"):
        res = run_marun(
            ["plan", "--format", "json", *options, "--nic", "lo", "--", script.name],
            env={**env, "ASCEND_DEVICE_ID": device},
            cwd=script.parent,
        )
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        counts[device] = sum(len(n["processes"]) for n in data["nodes"])
        if device == "5":
            assert any("ASCEND_DEVICE_ID=5" in note for note in data["notes"])
    assert counts["0"] > 1 and counts["5"] == 0
    res = run_marun(
        ["run", *options, "--nic", "lo", "--", script.name],
        env={**env, "ASCEND_DEVICE_ID": "5"},
        cwd=script.parent,
    )
    assert (res.returncode, res.stdout) == (0, "")  # nothing started


def test_a_bad_ascend_device_id_is_bad_input(script: Path) -> None:
    res = run_marun(
        ["plan", "--mode", "mindspore", "--", script.name],
        env={"MA_NUM_GPUS": "8", "ASCEND_DEVICE_ID": "x"},
        cwd=script.parent,
    )
    assert res.returncode == 2 and "ASCEND_DEVICE_ID='x'" in res.stderr


def _loopback_table(path: Path, servers: int, devices: int) -> Path:
    servers_list = [
        {
            "server_id": f"127.0.0.{s + 1}",
            "host_nic_ip": f"127.0.0.{s + 1}",
            "device": [
                {"device_id": str(d), "device_ip": "192.0.2.1", "rank_id": str(s * devices + d)}
                for d in range(devices)
            ],
        }
        for s in range(servers)
    ]
    table = {"version": "1.0", "server_count": str(servers), "server_list": servers_list}
    path.write_text(json.dumps({**table, "status": "completed"}))
    return path


@pytest.mark.parametrize(("servers", "devices"), [(1, 8), (2, 8)], ids=["1x8", "2x8"])
@pytest.mark.parametrize("gpus", [None, "8"], ids=["no-MA_NUM_GPUS", "MA_NUM_GPUS=8"])
def test_mindspore_from_a_rank_table_plans_each_worker_on_its_own_start(
    tmp_path: Path, servers: int, devices: int, gpus: str | None
) -> None:
    """Every device's start plans its own rank's worker (device 0's of the first server also the
    scheduler), so the whole table's workers start exactly once; on several servers each start
    is one slot of its server's coordination."""
    from marun.inputs.injected import read_platform
    from marun.inputs.settings import Settings
    from marun.launch import build_plan

    table = _loopback_table(tmp_path / "table.json", servers, devices)
    (tmp_path / "train.py").write_text("pass\n")
    size = servers * devices
    workers, schedulers, slots = [], 0, set()
    for rank in range(size):
        env = {
            "RANK_TABLE_FILE": str(table),
            "RANK_ID": str(rank),
            "RANK_SIZE": str(size),
            "ASCEND_DEVICE_ID": str(rank % devices),
            **({"MA_NUM_GPUS": gpus} if gpus else {}),
        }
        platform = read_platform(["train.py"], env, str(tmp_path), Settings(nic="lo"))
        launch = build_plan("mindspore", platform)
        procs = launch.nodes[0].processes
        workers += [int(p.env["MS_NODE_ID"]) for p in procs if p.role == "worker"]
        schedulers += sum(p.role == "scheduler" for p in procs)
        assert {p.env["MS_WORKER_NUM"] for p in procs} == {str(size)}
        if servers > 1:
            assert launch.coordination is not None
            coord = launch.coordination
            assert (coord.nodes, coord.slots) == (servers, devices)
            slots.add((coord.index, coord.slot))
        else:
            assert launch.coordination is None  # one server: nothing to coordinate
    assert sorted(workers) == list(range(size)) and schedulers == 1
    if servers > 1:
        assert slots == {(s, d) for s in range(servers) for d in range(devices)}
