"""MindSpore from a rank table inside pods: the table's addresses are the machines' (the host
network); the scheduler binds, and the workers dial, node 0's pod address instead, as the path
without a rank table does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import DATA, run_marun

TABLE = DATA / "ranktables" / "server_list_2x2.json"  # node-a 192.0.2.11 ranks 0-1, node-b 2-3


def _sched_hosts(script: Path, env: dict[str, str]) -> set[str]:
    res = run_marun(
        ["plan", "--format", "json", "--mode", "mindspore", "--nic", "lo", "--", script.name],
        env={"RANK_TABLE_FILE": str(TABLE), **env},
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return {p["env"]["MS_SCHED_HOST"] for n in data["nodes"] for p in n["processes"]}


def test_node_0_in_a_pod_binds_its_pod_address(script: Path) -> None:
    env = {"MA_CURRENT_HOST_IP": "192.0.2.11", "MA_CURRENT_IP": "127.0.0.1"}
    assert _sched_hosts(script, env) == {"127.0.0.1"}


def test_other_nodes_in_pods_dial_node_0s_pod_address(script: Path) -> None:
    env = {
        "MA_CURRENT_HOST_IP": "192.0.2.12",
        "MA_CURRENT_IP": "10.1.1.2",
        "MA_NUM_HOSTS": "2",
        "VC_TASK_INDEX": "1",
        "VC_WORKER_HOSTS": "10.1.1.1,10.1.1.2",
    }
    assert _sched_hosts(script, env) == {"10.1.1.1"}


def test_on_the_host_network_the_table_address_stays(script: Path) -> None:
    env = {"MA_CURRENT_HOST_IP": "192.0.2.11", "MA_CURRENT_IP": "192.0.2.11"}
    assert _sched_hosts(script, env) == {"192.0.2.11"}


def test_an_inherited_ms_node_id_is_refused_and_per_process_ones_are_noted(script: Path) -> None:
    base = ["plan", "--format", "json", "--mode", "mindspore", "--nic", "lo", "--", script.name]
    env = {"MA_NUM_GPUS": "2", "MA_CURRENT_IP": "127.0.0.1"}
    res = run_marun(base, env={**env, "MS_NODE_ID": "3"}, cwd=script.parent)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "MS_NODE_ID='3'" in res.stderr
    res = run_marun(
        base, env={**env, "MS_WORKER_NUM": "99", "MS_ROLE": "MS_WORKER"}, cwd=script.parent
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert any("inherited MS_ROLE='MS_WORKER', MS_WORKER_NUM='99'" in n for n in data["notes"])
    assert {p["env"]["MS_WORKER_NUM"] for n in data["nodes"] for p in n["processes"]} == {"2"}


def test_node_0_says_when_its_name_answers_another_address(script: Path) -> None:
    """Node 0's scheduler binds this node's address; the others dial node 0's name. A name that
    answers with another address here (localhost: 127.0.0.1, the NIC: another) is said in a
    note; one that agrees says nothing."""
    import pytest

    from marun.inputs.nic import ipv4_by_interface

    others = [name for name in ipv4_by_interface() if name != "lo"]
    if not others:
        pytest.skip("no interface but lo here")
    base = ["plan", "--format", "json", "--mode", "mindspore", "--", script.name]
    env = {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": "localhost,node-1"}
    data = json.loads(
        run_marun([*base], env={**env, "MARUN_NIC": others[0]}, cwd=script.parent).stdout
    )
    assert any("node 0's name 'localhost' resolves here to 127.0.0.1" in n for n in data["notes"])
    data = json.loads(run_marun([*base], env={**env, "MARUN_NIC": "lo"}, cwd=script.parent).stdout)
    assert not any("resolves here to" in n for n in data["notes"])
