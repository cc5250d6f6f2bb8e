"""`--mode ascend`: the rank-table launch, planned through the real CLI.

No Ascend NPU exists on this machine, so nothing here pretends to drive one: the plan (which
process, with which env, in which directory) is what can be asserted, and the one `marun run`
test starts a plain Python script that reports the env and directory it got.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA, run_marun

TABLES = DATA / "ranktables"
NO_ADDRESS = (
    "server 10.*.*.*: HCCL_SOCKET_IFNAME not set, the rank table gives no address for it "
    "(set nic to choose an interface)"
)


def _plan(script: Path, env: dict[str, str], *options: str, code: int = 0) -> dict[str, Any]:
    res = run_marun(
        ["plan", *options, "--format", "json", "--", script.name, "--epochs", "1"],
        env=env,
        cwd=script.parent,
    )
    assert res.returncode == code, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    # The supervision settings (defaults here) are tested with the CLI; these tests are the layout.
    assert data.pop("supervision")["grace_period"] == 30.0
    # A lone process is exec'd: the plan says so (tested in test_per_device_seed_002).
    data["notes"] = [n for n in data["notes"] if not n.startswith(EXEC_NOTE)]
    return data


EXEC_NOTE = "one process: marun execs it (unless marun is PID 1)"


def _proc(
    workdir: Path,
    script: Path,
    table: Path,
    rank: int,
    device_id: int,
    ascend_device_id: int,
    size: int,
    **extra: str,
) -> dict[str, Any]:
    cwd = str(workdir / f"device{device_id}")
    return {
        "name": f"rank{rank}",
        "argv": [sys.executable, str(script.resolve()), "--epochs", "1"],
        "env": {
            "DEVICE_ID": str(device_id),
            "ASCEND_DEVICE_ID": str(ascend_device_id),
            "RANK_ID": str(rank),
            "RANK_SIZE": str(size),
            "RANK_TABLE_FILE": str(table),
            "HCCL_CONNECT_TIMEOUT": "1800",
            **extra,
        },
        "cwd": cwd,
        "log": os.path.join(cwd, f"rank_{rank}.log"),
        "role": "worker",
        "rank": rank,
        "daemon": False,
        "restart_on_failure": False,
    }


def test_auto_mode_picks_ascend_from_the_rank_table(script: Path) -> None:
    table = TABLES / "ascend_tutorial_1x8.json"
    plan = _plan(script, {"RANK_TABLE_FILE": str(table), "RANK_ID": "0"})
    assert plan["mode"] == "ascend"


def test_per_device_seed_002(script: Path) -> None:
    """The tutorial's 8-card server as the platform runs it: one start per device; this is rank
    3."""
    table = TABLES / "ascend_tutorial_1x8.json"
    workdir = script.parent.resolve()
    env = {"RANK_TABLE_FILE": str(table), "RANK_ID": "3", "RANK_SIZE": "8", "ASCEND_DEVICE_ID": "3"}
    res = run_marun(["plan", "--mode", "ascend", "--", script.name], env=env, cwd=script.parent)
    exec_notes = [n for n in json.loads(res.stdout)["notes"] if n.startswith(EXEC_NOTE)]
    assert len(exec_notes) == 1 and "device3/rank_3.log" in exec_notes[0]
    assert _plan(script, env, "--mode", "ascend") == {
        "schema": 1,
        "mode": "ascend",
        "nodes": [
            {
                "index": 0,
                "host": "10.*.*.*",
                "files": [],
                "processes": [_proc(workdir, script, table, 3, 3, 3, 8)],
            }
        ],
        "notes": [NO_ADDRESS],
    }


# (table, RANK_ID, the platform's ASCEND_DEVICE_ID or None) ->
# (server index, host, physical DEVICE_ID, ASCEND_DEVICE_ID the process gets)
PER_DEVICE = [
    ("group_list_2x8.json", "12", "4", (1, "192.0.2.12", 4, 4)),
    # The table, not ASCEND_DEVICE_ID, says which card: rank 3 is card 5 of the second server;
    # the platform's logical id is passed on unchanged.
    ("group_list_2x2_rank_id.json", "3", "1", (1, "192.0.2.12", 5, 1)),
    # Without the platform's value, ASCEND_DEVICE_ID is the device's position on its server.
    ("group_list_2x2_rank_id.json", "0", None, (0, "192.0.2.11", 4, 0)),
    ("server_list_2x2.json", "2", None, (1, "192.0.2.12", 0, 0)),
    ("server_list_2x8.json", "15", "7", (1, "192.0.2.12", 7, 7)),
    ("superpod_1_2.json", "1", "1", (0, "192.0.2.11", 1, 1)),
]


@pytest.mark.parametrize(("name", "rank", "ascend_id", "expected"), PER_DEVICE)
def test_per_device_picks_the_rank_s_device(
    script: Path, name: str, rank: str, ascend_id: str | None, expected: tuple[Any, ...]
) -> None:
    index, host, device_id, ascend_device_id = expected
    table = TABLES / name
    env = {"RANK_TABLE_FILE": str(table), "RANK_ID": rank}
    if ascend_id is not None:
        env["ASCEND_DEVICE_ID"] = ascend_id
    plan = _plan(script, env, "--mode", "ascend")
    (node,) = plan["nodes"]
    assert (node["index"], node["host"]) == (index, host)
    size = {"group_list_2x8.json": 16, "server_list_2x8.json": 16}.get(name, 4)
    assert node["processes"] == [
        _proc(script.parent.resolve(), script, table, int(rank), device_id, ascend_device_id, size)
    ]


def test_per_node_plans_every_device_of_this_server(script: Path) -> None:
    """--per-node: the start file runs once per node; node 1 of the ModelArts group_list table
    (listed first in the file) gets ranks 8-15. The platform's ASCEND_DEVICE_ID=0 belongs to the
    one start, not to the 8 processes: each gets its own position."""
    table = TABLES / "group_list_2x8.json"
    workdir = script.parent.resolve()
    env = {
        "RANK_TABLE_FILE": str(table),
        "MA_NUM_HOSTS": "2",
        "VC_TASK_INDEX": "1",
        "ASCEND_DEVICE_ID": "0",
    }
    data = _plan(script, env, "--per-node")
    # Two servers: the nodes report to the first server's marun (docs/supervision.md).
    coordination = data.pop("coordination")
    assert (coordination["host"], coordination["nodes"], coordination["index"]) == (
        "192.0.2.11",
        2,
        1,
    )
    assert (coordination["slots"], coordination["port"]) == (1, 36668)
    assert data == {
        "schema": 1,
        "mode": "ascend",
        "nodes": [
            {
                "index": 1,
                "host": "192.0.2.12",
                "files": [],
                "processes": [_proc(workdir, script, table, 8 + i, i, i, 16) for i in range(8)],
            }
        ],
        "notes": [
            "this node is rank table server 192.0.2.12 (#1): VC_TASK_INDEX=1, by position "
            "(no server's address is MA_CURRENT_IP)",
            "server 192.0.2.12: HCCL_SOCKET_IFNAME not set, no interface here holds 192.0.2.12 "
            "(set nic to choose an interface)",
        ],
    }


def test_all_nodes_plans_every_server(script: Path) -> None:
    table = TABLES / "server_list_2x2.json"
    workdir = script.parent.resolve()
    env = {"RANK_TABLE_FILE": str(table), "RANK_ID": "1", "ASCEND_DEVICE_ID": "1"}
    plan = _plan(script, env, "--all-nodes")
    assert plan == {
        "schema": 1,
        "mode": "ascend",
        "nodes": [
            {
                "index": 0,
                "host": "192.0.2.11",
                "files": [],
                "processes": [_proc(workdir, script, table, r, r, r, 4) for r in (0, 1)],
            },
            {
                "index": 1,
                "host": "192.0.2.12",
                "files": [],
                "processes": [_proc(workdir, script, table, r, r - 2, r - 2, 4) for r in (2, 3)],
            },
        ],
        "notes": [
            "per device: the platform starts marun once per device with its RANK_ID; each start "
            "runs only that rank's process (all shown here)",
            "server node-a: HCCL_SOCKET_IFNAME not set, no interface here holds 192.0.2.11 "
            "(set nic to choose an interface)",
            "server node-b: HCCL_SOCKET_IFNAME not set, no interface here holds 192.0.2.12 "
            "(set nic to choose an interface)",
            f"rank table {table}: 2 of 2 servers do not have 8 devices (node-a has 2, node-b "
            "has 2); the platform gives a job that spans servers all 8 devices of each, and "
            "HCCL may refuse another layout",
        ],
    }


def _loopback_table(tmp_path: Path) -> Path:
    """Two servers, the second one this machine (127.0.0.1 is on `lo` everywhere)."""
    table = tmp_path / "loopback_table.json"
    devices = [{"device_id": str(i), "device_ip": f"29.0.0.{i}"} for i in range(2)]
    table.write_text(
        json.dumps(
            {
                "version": "1.0",
                "server_count": "2",
                "server_list": [
                    {
                        "server_id": "192.0.2.11",
                        "device": [dict(d, rank_id=str(i)) for i, d in enumerate(devices)],
                    },
                    {
                        "server_id": "127.0.0.1",
                        "device": [dict(d, rank_id=str(2 + i)) for i, d in enumerate(devices)],
                    },
                ],
                "status": "completed",
            }
        )
    )
    return table


# (table, env) -> the server index --per-node picks, by the first hint that applies
WHICH_SERVER = [
    ("server_list_2x2.json", {"RANK_ID": "2"}, 1),
    ("group_list_2x8.json", {"MA_CURRENT_INSTANCE_NAME": "ma-job-a1-worker-1"}, 1),
    ("group_list_2x8.json", {"MA_CURRENT_INSTANCE_NAME": "ma-job-a1-worker-0"}, 0),
    ("server_list_2x8.json", {"VC_TASK_INDEX": "1"}, 1),
    ("server_list_2x8.json", {"MA_NUM_HOSTS": "2", "MA_TASK_INDEX": "1"}, 1),
    ("server_list_2x2.json", {"MA_CURRENT_IP": "192.0.2.12"}, 1),
    ("superpod_1_2.json", {"MA_CURRENT_HOST_IP": "198.51.100.2"}, 1),
    ("loopback", {}, 1),  # an interface of this machine holds the server's address
    ("ascend_tutorial_1x8.json", {}, 0),  # a single server
]


@pytest.mark.parametrize(("name", "env", "index"), WHICH_SERVER)
def test_per_node_finds_this_server(
    script: Path, name: str, env: dict[str, str], index: int
) -> None:
    table = _loopback_table(script.parent) if name == "loopback" else TABLES / name
    plan = _plan(script, {"RANK_TABLE_FILE": str(table), **env}, "--per-node")
    (node,) = plan["nodes"]
    assert node["index"] == index


# The Ascend Operator's table for two pods: it orders servers by the pod annotation
# hccl/rankIndex, numbered in the order of its pod list, so worker-1 (10.200.0.3) is listed first
# with ranks 0-7 and worker-0 (10.200.0.2) second. Each server gives the pod's own address as
# container_ip and the machine's as host_ip (no host_nic_ip).
OPERATOR_TABLE = TABLES / "ascend_operator_2x8.json"


@pytest.mark.parametrize(
    ("env", "index", "rule"),
    [
        (
            {"VC_TASK_INDEX": "0", "MA_CURRENT_IP": "10.200.0.2"},
            1,
            "its container_ip is this pod's MA_CURRENT_IP=10.200.0.2; it is server 1 of the "
            "table, not VC_TASK_INDEX=0: the table's order is not the pods'",
        ),
        (
            {"VC_TASK_INDEX": "1", "MA_CURRENT_IP": "10.200.0.3"},
            0,
            "its container_ip is this pod's MA_CURRENT_IP=10.200.0.3; it is server 0 of the "
            "table, not VC_TASK_INDEX=1: the table's order is not the pods'",
        ),
        # No index to compare with: the address alone.
        (
            {"MA_CURRENT_IP": "10.200.0.2"},
            1,
            "its container_ip is this pod's MA_CURRENT_IP=10.200.0.2",
        ),
        # An address the table does not hold: the index, by position, and the plan says so.
        (
            {"VC_TASK_INDEX": "1", "MA_CURRENT_IP": "10.9.9.9"},
            1,
            "VC_TASK_INDEX=1, by position (no server's address is MA_CURRENT_IP)",
        ),
    ],
)
def test_the_operator_s_table_is_matched_by_this_pod_s_address(
    script: Path, env: dict[str, str], index: int, rule: str
) -> None:
    base = {"RANK_TABLE_FILE": str(OPERATOR_TABLE), "MA_NUM_HOSTS": "2"}
    plan = _plan(script, {**base, **env}, "--per-node")
    (node,) = plan["nodes"]
    assert node["index"] == index
    assert node["host"] == ("10.200.0.3", "10.200.0.2")[index]  # the pod's address, not host_ip
    assert [p["rank"] for p in node["processes"]] == list(range(8 * index, 8 * index + 8))
    server = ("192.0.2.22", "192.0.2.21")[index]
    assert f"this node is rank table server {server} (#{index}): {rule}" in plan["notes"]


def test_an_index_out_of_range_is_refused_even_where_the_address_decides(script: Path) -> None:
    env = {
        "RANK_TABLE_FILE": str(OPERATOR_TABLE),
        "MA_NUM_HOSTS": "2",
        "VC_TASK_INDEX": "2",
        "MA_CURRENT_IP": "10.200.0.2",
    }
    res = run_marun(
        ["plan", "--mode", "ascend", "--per-node", "--", script.name], env=env, cwd=script.parent
    )
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "VC_TASK_INDEX='2'" in res.stderr


def test_hccl_socket_ifname_from_the_interface_holding_the_server_address(script: Path) -> None:
    table = _loopback_table(script.parent)
    plan = _plan(script, {"RANK_TABLE_FILE": str(table), "RANK_ID": "3"})
    (proc,) = plan["nodes"][0]["processes"]
    assert proc["env"]["HCCL_SOCKET_IFNAME"] == "lo"
    assert plan["nodes"][0]["host"] == "127.0.0.1"
    assert [n for n in plan["notes"] if "8 devices" not in n] == []  # a 2 x 2 table: a note


def test_hccl_socket_ifname_from_the_configured_nic(script: Path) -> None:
    env = {"RANK_TABLE_FILE": str(TABLES / "ascend_tutorial_1x8.json"), "RANK_ID": "0"}
    plan = _plan(script, env, "--nic", "lo")
    assert plan["nodes"][0]["processes"][0]["env"]["HCCL_SOCKET_IFNAME"] == "lo"
    assert plan["notes"] == []


def test_the_user_s_hccl_settings_are_left_alone(script: Path) -> None:
    table = _loopback_table(script.parent)
    env = {
        "RANK_TABLE_FILE": str(table),
        "RANK_ID": "2",
        "HCCL_SOCKET_IFNAME": "eth9",
        "HCCL_CONNECT_TIMEOUT": "120",
    }
    plan = _plan(script, env, "--nic", "lo")
    proc_env = plan["nodes"][0]["processes"][0]["env"]
    assert "HCCL_SOCKET_IFNAME" not in proc_env  # inherited unchanged: not marun's to list
    assert "HCCL_CONNECT_TIMEOUT" not in proc_env


def test_relative_rank_table_path_becomes_absolute(script: Path) -> None:
    (script.parent / "rt.json").write_text((TABLES / "ascend_tutorial_1x8.json").read_text())
    plan = _plan(script, {"RANK_TABLE_FILE": "rt.json", "RANK_ID": "0"})
    env = plan["nodes"][0]["processes"][0]["env"]
    assert env["RANK_TABLE_FILE"] == str(script.parent.resolve() / "rt.json")


# (id, env besides a valid RANK_TABLE_FILE unless given, options, what stderr says)
TUTORIAL = str(TABLES / "ascend_tutorial_1x8.json")
TWO = str(TABLES / "server_list_2x8.json")
BAD_INPUT = [
    ("table-unset", {"RANK_TABLE_FILE": "", "RANK_ID": "0"}, [], "RANK_TABLE_FILE is not set"),
    (
        "table-missing",
        {"RANK_TABLE_FILE": "nowhere.json", "RANK_ID": "0"},
        [],
        "RANK_TABLE_FILE='nowhere.json': expected an existing rank table file",
    ),
    ("rank-unset", {"RANK_TABLE_FILE": TUTORIAL}, [], "RANK_ID is not set"),
    (
        "rank-out-of-range",
        {"RANK_TABLE_FILE": TUTORIAL, "RANK_ID": "8"},
        [],
        f"RANK_ID='8': expected an integer from 0 to 7 (rank table {TUTORIAL} has 8 ranks)",
    ),
    (
        "rank-not-integer",
        {"RANK_TABLE_FILE": TUTORIAL, "RANK_ID": "one"},
        [],
        "RANK_ID='one': expected an integer from 0 to 7",
    ),
    (
        "rank-size-disagrees",
        {"RANK_TABLE_FILE": TUTORIAL, "RANK_ID": "0", "RANK_SIZE": "16"},
        [],
        f"RANK_SIZE='16': expected 8, the number of ranks in rank table {TUTORIAL}",
    ),
    (
        "num-hosts-disagrees",
        {"RANK_TABLE_FILE": TWO, "RANK_ID": "0", "MA_NUM_HOSTS": "3", "VC_TASK_INDEX": "0"},
        [],
        f"MA_NUM_HOSTS='3': expected 2, the number of servers in rank table {TWO}",
    ),
    (
        "task-index-beyond-the-table",
        {"RANK_TABLE_FILE": TWO, "VC_TASK_INDEX": "2"},
        ["--per-node"],
        f"VC_TASK_INDEX='2': expected an index below 2, the servers in rank table {TWO}",
    ),
    (
        "this-node-not-in-the-table",
        {"RANK_TABLE_FILE": TWO},
        ["--per-node"],
        f"rank table {TWO}: none of its servers (192.0.2.11, 192.0.2.12) is this machine",
    ),
]


@pytest.mark.parametrize(
    ("case", "env", "options", "says"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT]
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    script: Path, case: str, env: dict[str, str], options: list[str], says: str
) -> None:
    before = sorted(os.listdir(script.parent))
    res = run_marun(
        ["plan", "--mode", "ascend", *options, "--format", "json", "--", script.name],
        env=env,
        cwd=script.parent,
    )
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert says in lines[0]
    assert sorted(os.listdir(script.parent)) == before


def test_one_card_container_says_which_device_id_a_script_takes(script: Path) -> None:
    """A container that sees one card: the platform gives ASCEND_DEVICE_ID=0 (logical) for the
    rank whose table entry is physical card 5. The process gets both, and the plan says which
    one a script passes to set_context/set_device (the logical one)."""
    table = script.parent / "one_card.json"
    table.write_text(
        json.dumps(
            {
                "version": "1.0",
                "status": "completed",
                "server_count": "1",
                "server_list": [
                    {
                        "server_id": "127.0.0.1",
                        "device": [{"device_id": "5", "device_ip": "29.0.0.5", "rank_id": "0"}],
                    }
                ],
            }
        )
    )
    env = {"RANK_TABLE_FILE": str(table), "RANK_ID": "0", "ASCEND_DEVICE_ID": "0"}
    plan = _plan(script, env, "--mode", "ascend")
    (proc,) = plan["nodes"][0]["processes"]
    assert (proc["env"]["DEVICE_ID"], proc["env"]["ASCEND_DEVICE_ID"]) == ("5", "0")
    (note,) = [n for n in plan["notes"] if "DEVICE_ID=5" in n]
    assert "takes ASCEND_DEVICE_ID" in note
    same = _plan(script, {**env, "ASCEND_DEVICE_ID": "5"}, "--mode", "ascend")
    assert not [n for n in same["notes"] if "physical id" in n]


def test_a_placeholder_server_id_is_no_coordination_host(script: Path) -> None:
    """Part 19, item 12: the documents' placeholder server_id `10.*.*.*`, with no host_nic_ip,
    would become node 0's address every node dials: bad input naming it."""
    table = json.loads((TABLES / "server_list_2x2.json").read_text())
    for server in table["server_list"]:
        del server["host_nic_ip"]
    table["server_list"][1]["server_id"] = "10.*.*.*"  # node-a, ranks 0-1: node 0
    path = script.parent / "placeholder.json"
    path.write_text(json.dumps(table))
    env = {"RANK_TABLE_FILE": str(path), "RANK_ID": "2", "MA_CURRENT_IP": "node-b"}
    for command in ("plan", "run"):
        res = run_marun([command, "--per-node", "--", script.name], env, script.parent)
        assert res.returncode == 2, res.stderr
        assert "node 0's address='10.*.*.*': expected a host name or an IP address" in res.stderr
