"""Ascend's platform runs the start file once per device. Modes that start a whole node's
processes from one run (mindspore; ascend with --per-node) plan them on device 0's run only:
the other runs plan nothing, instead of N schedulers on one port and N x N workers."""

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
