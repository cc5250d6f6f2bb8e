"""The Ascend rank table reader: both formats, every validation error, the `initializing` wait.

No Ascend NPU exists here and none is needed: a rank table is a JSON file, read the same way on
any machine. Valid tables are parsed in process (a pure function); every bad table goes through
the real CLI (`marun plan --mode ascend`) to check the user-facing contract: exit code 2, one
stderr line naming the file and the problem, no traceback, nothing written.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA, run_marun
from marun.errors import InputError
from marun.inputs import ranktable_platform
from marun.inputs.ranktable import parse_rank_table
from marun.inputs.ranktable_platform import layout_notes, load_rank_table

TABLES = DATA / "ranktables"


def _layout(
    path: Path,
) -> list[tuple[str, str | None, list[tuple[int, int, str]], tuple[str, ...]]]:
    """(server_id, host_ip, [(device_id, rank, device_ip)], pod_names) per server, in order."""
    table = parse_rank_table(path.read_text(), str(path))
    return [
        (
            s.server_id,
            s.host_ip,
            [(d.device_id, d.rank, d.device_ip) for d in s.devices],
            s.pod_names,
        )
        for s in table.servers
    ]


def _eight(base: str, first_rank: int) -> list[tuple[int, int, str]]:
    return [(i, first_rank + i, f"{base}.{i}") for i in range(8)]


SEED_IPS = [f"192.{1 + i % 4}.27.{6 + i // 4}" for i in range(8)]

# (file, format, rank_size, expected layout)
VALID = [
    (
        # The HCCL tutorial's table: 8 one-device instances on one server form one 8-device
        # server; its server_id is the tutorial's placeholder, not an address.
        "ascend_tutorial_1x8.json",
        "group_list",
        8,
        [("10.*.*.*", None, [(i, i, SEED_IPS[i]) for i in range(8)], ())],
    ),
    (
        # Pods listed worker-1 first: ranks follow the pod index, not the file order; the
        # device_count 0 "ps" group takes no ranks and forms no server.
        "group_list_2x8.json",
        "group_list",
        16,
        [
            ("192.0.2.11", "192.0.2.11", _eight("29.0.0", 0), ("ma-job-a1-worker-0",)),
            ("192.0.2.12", "192.0.2.12", _eight("29.1.0", 8), ("ma-job-a1-worker-1",)),
        ],
    ),
    (
        # rank_id on a two-device instance is its first device's rank; the instance listed
        # first holds ranks 2-3, so it is the second server.
        "group_list_2x2_rank_id.json",
        "group_list",
        4,
        [
            ("192.0.2.11", "192.0.2.11", [(4, 0, "29.0.0.4"), (5, 1, "29.0.0.5")], ()),
            ("192.0.2.12", "192.0.2.12", [(4, 2, "29.1.0.4"), (5, 3, "29.1.0.5")], ()),
        ],
    ),
    (
        "server_list_2x8.json",
        "server_list",
        16,
        [
            ("192.0.2.11", "192.0.2.11", _eight("29.0.0", 0), ()),
            ("192.0.2.12", "192.0.2.12", _eight("29.1.0", 8), ()),
        ],
    ),
    (
        # Named servers (host_nic_ip gives the address), listed and with devices out of rank
        # order: servers come in the rank order of their first device, devices in rank order.
        "server_list_2x2.json",
        "server_list",
        4,
        [
            ("node-a", "192.0.2.11", [(0, 0, "29.0.0.0"), (1, 1, "29.0.0.1")], ()),
            ("node-b", "192.0.2.12", [(0, 2, "29.1.0.0"), (1, 3, "29.1.0.1")], ()),
        ],
    ),
    (
        # SuperPoD (version 1.2): super_pod_list and super_device_id are ignored; the
        # container's address (container_ip) is the one its processes hold.
        "superpod_1_2.json",
        "server_list",
        4,
        [
            ("198.51.100.1", "192.0.2.11", [(0, 0, "29.0.0.0"), (1, 1, "29.0.0.1")], ()),
            ("198.51.100.2", "192.0.2.12", [(0, 2, "29.1.0.0"), (1, 3, "29.1.0.1")], ()),
        ],
    ),
]


@pytest.mark.parametrize(("name", "fmt", "size", "layout"), VALID, ids=[v[0] for v in VALID])
def test_valid_tables(name: str, fmt: str, size: int, layout: list[Any]) -> None:
    path = TABLES / name
    table = parse_rank_table(path.read_text(), str(path))
    assert table.format == fmt
    assert table.rank_size == size
    assert _layout(path) == layout
    for server_index, server in enumerate(table.servers):
        for device in server.devices:
            assert table.device_of_rank(device.rank) == (server_index, device)


def test_tutorial_fixed_copy_differs_from_the_tutorial_only_by_its_trailing_comma() -> None:
    verbatim = (TABLES / "ascend_tutorial_1x8_verbatim.json").read_text()
    fixed = (TABLES / "ascend_tutorial_1x8.json").read_text()
    assert verbatim.replace('"10.*.*.*"}, ]', '"10.*.*.*"} ]') == fixed


# -- bad tables, through the real CLI -----------------------------------------------------------


def _server_list() -> dict[str, Any]:
    return json.loads((TABLES / "server_list_2x2.json").read_text())  # type: ignore[no-any-return]


def _group_list() -> dict[str, Any]:
    return json.loads((TABLES / "group_list_2x8.json").read_text())  # type: ignore[no-any-return]


def _edit(base: Callable[[], dict[str, Any]], change: Callable[[dict[str, Any]], None]) -> str:
    data = copy.deepcopy(base())
    change(data)
    return json.dumps(data)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change that sets one field, addressed as `a.0.b` (list indexes as numbers)."""

    def change(data: dict[str, Any]) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
        target: Any = data
        for key in keys[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value

    return change


_DELETE = object()
SL_DEV = "server_list.1.device"  # node-a's devices: ranks 0 and 1
GL_INST = "group_list.1.instance_list"  # worker-1 (ranks 8-15), then worker-0 (ranks 0-7)


def _worker0_ranked(data: dict[str, Any]) -> None:
    data["group_list"][1]["instance_list"][1]["rank_id"] = "0"


def _same_pod_index(data: dict[str, Any]) -> None:
    data["group_list"][1]["instance_list"][1]["pod_name"] = "ma-job-a1-worker-1"


def _no_devices(data: dict[str, Any]) -> None:
    data["group_list"] = data["group_list"][:1]
    data["group_count"] = "1"


def _no_servers(data: dict[str, Any]) -> None:
    data["server_list"] = []
    data["server_count"] = "0"


def _rank_gap(data: dict[str, Any]) -> None:
    for device in data["server_list"][0]["device"]:
        device["rank_id"] = str(int(device["rank_id"]) + 1)  # node-b: ranks 3, 4


def _duplicate_server(data: dict[str, Any]) -> None:
    data["server_list"][0]["server_id"] = "node-a"


# (id, table text, what stderr must say besides the file's path)
BAD: list[tuple[str, str, list[str]]] = [
    (
        "tutorial-verbatim",  # the tutorial's own example has a trailing comma
        (TABLES / "ascend_tutorial_1x8_verbatim.json").read_text(),
        ["not valid JSON", "line 1 column 1003"],
    ),
    ("empty", "", ["empty"]),
    ("not-an-object", '["status", "completed"]', ["top level is a JSON list", "JSON object"]),
    ("status-missing", _edit(_server_list, _set("status", _DELETE)), ["status is missing"]),
    ("status-unknown", _edit(_server_list, _set("status", "failed")), ["status='failed'"]),
    ("neither-format", '{"status": "completed"}', ["group_list", "server_list", "neither"]),
    ("no-devices-group-list", _edit(_group_list, _no_devices), ["lists no devices"]),
    ("no-devices-server-list", _edit(_server_list, _no_servers), ["lists no devices"]),
    (
        "empty-device-list",
        _edit(_server_list, _set(SL_DEV, [])),
        ["server_list[1].device is empty"],
    ),
    (
        "rank-id-not-integer",
        _edit(_server_list, _set(f"{SL_DEV}.0.rank_id", "zero")),
        ["server_list[1].device[0].rank_id='zero'", "non-negative integer"],
    ),
    (
        "rank-id-missing",
        _edit(_server_list, _set(f"{SL_DEV}.0.rank_id", _DELETE)),
        ["server_list[1].device[0].rank_id is missing"],
    ),
    (
        "device-id-not-integer",
        _edit(_server_list, _set(f"{SL_DEV}.1.device_id", "1.0")),
        ["server_list[1].device[1].device_id='1.0'", "non-negative integer"],
    ),
    (
        "server-count-not-integer",
        _edit(_server_list, _set("server_count", "two")),
        ["server_count='two'", "non-negative integer"],
    ),
    (
        "device-count-not-integer",
        _edit(_group_list, _set("group_list.1.device_count", "-16")),
        ["group_list[1].device_count='-16'", "non-negative integer"],
    ),
    (
        "rank-id-duplicated",
        _edit(_server_list, _set(f"{SL_DEV}.1.rank_id", "0")),
        ["rank 0 is given twice", "server_list[1].device[1]"],
    ),
    ("ranks-not-contiguous", _edit(_server_list, _rank_gap), ["rank 2 is missing", "no gap"]),
    (
        "ranks-not-from-zero",
        _edit(_server_list, _set(f"{SL_DEV}.0.rank_id", "4")),
        ["rank 0 is missing"],
    ),
    (
        "server-id-duplicated",
        _edit(_server_list, _duplicate_server),
        ["server_list[1].server_id='node-a'", "server_list[0]", "each server once"],
    ),
    (
        "device-id-duplicated-on-a-server",
        _edit(_server_list, _set(f"{SL_DEV}.1.device_id", "0")),
        ["device_id 0 appears twice on server 'node-a'"],
    ),
    (
        "server-count-disagrees",
        _edit(_server_list, _set("server_count", "3")),
        ["server_count='3'", "server_list has 2 server(s)"],
    ),
    (
        "group-count-disagrees",
        _edit(_group_list, _set("group_count", "1")),
        ["group_count='1'", "group_list has 2 group(s)"],
    ),
    (
        "device-count-disagrees",
        _edit(_group_list, _set("group_list.1.device_count", "8")),
        ["group_list[1].device_count='8'", "list 16 device(s)"],
    ),
    (
        "instance-count-disagrees",
        _edit(_group_list, _set("group_list.1.instance_count", "3")),
        ["group_list[1].instance_count='3'", "instance_list has 2 instance(s)"],
    ),
    (
        "instance-without-rank-or-pod-index",
        _edit(_group_list, _set(f"{GL_INST}.0.pod_name", "worker")),
        ["group_list[1].instance_list[0]", "neither a rank_id nor a pod_name ending in -<index>"],
    ),
    (
        "rank-id-on-some-instances-only",
        _edit(_group_list, _worker0_ranked),
        ["group_list[1].instance_list[0] has no rank_id while other instances have one"],
    ),
    (
        "device-ip-not-ipv4",
        _edit(_server_list, _set(f"{SL_DEV}.1.device_ip", "300.1.1.1")),
        ["server_list[1].device[1].device_ip='300.1.1.1'", "expected an IPv4 address"],
    ),
    (
        "device-ip-not-ipv4-group-list",
        _edit(_group_list, _set(f"{GL_INST}.0.devices.3.device_ip", "29.1.0")),
        ["group_list[1].instance_list[0].devices[3].device_ip='29.1.0'", "an IPv4 address"],
    ),
    # Part 19, item 5: HCCL cannot run a device without its address; the counts a table states
    # are required as its status is.
    (
        "device-ip-missing",
        _edit(_server_list, _set(f"{SL_DEV}.1.device_ip", _DELETE)),
        ["server_list[1].device[1].device_ip is missing: expected a string"],
    ),
    (
        "device-ip-empty",
        _edit(_server_list, _set(f"{SL_DEV}.0.device_ip", "")),
        ["server_list[1].device[0].device_ip=''", "an IPv4 address (HCCL needs it)"],
    ),
    (
        "device-ip-empty-group-list",
        _edit(_group_list, _set(f"{GL_INST}.0.devices.2.device_ip", " ")),
        ["group_list[1].instance_list[0].devices[2].device_ip=' '", "IPv4"],
    ),
    (
        "server-count-missing",
        _edit(_server_list, _set("server_count", _DELETE)),
        ["server_count is missing: expected a non-negative integer"],
    ),
    (
        "group-count-missing",
        _edit(_group_list, _set("group_count", _DELETE)),
        ["group_count is missing: expected a non-negative integer"],
    ),
    (
        "server-num-disagrees",
        _edit(_group_list, _set("group_list.1.server_num", "3")),
        ["group_list[1].server_num='3'", "on 2 server(s)"],
    ),
    (
        "pod-index-duplicated",
        _edit(_group_list, _same_pod_index),
        ["group_list[1].instance_list[1].pod_name='ma-job-a1-worker-1'", "index 1"],
    ),
]


@pytest.mark.parametrize(("case", "text", "says"), BAD, ids=[b[0] for b in BAD])
def test_bad_table_is_one_line_exit_2_and_nothing_written(
    script: Path, case: str, text: str, says: list[str]
) -> None:
    table = script.parent / "rank_table.json"
    table.write_text(text)
    before = sorted(os.listdir(script.parent))
    res = run_marun(
        ["plan", "--mode", "ascend", "--format", "json", "--", script.name],
        env={"RANK_TABLE_FILE": str(table), "RANK_ID": "0", "ASCEND_DEVICE_ID": "0"},
        cwd=script.parent,
    )
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert f"rank table {table}:" in lines[0]
    for fragment in says:
        assert fragment in lines[0]
    assert sorted(os.listdir(script.parent)) == before  # no device<i> directory, nothing else


# -- waiting while the platform fills the table in ------------------------------------------


def _initializing() -> str:
    return json.dumps({"status": "initializing", "group_count": "0", "group_list": []})


def _replace(path: Path, text: str) -> None:
    """Rewrite the file the way a config map update lands: a new file renamed over the old."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _later(delay: float, action: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_run_fails_on_a_table_that_never_completes_after_the_timeout(script: Path) -> None:
    table = script.parent / "rank_table.json"
    table.write_text(_initializing())
    res = run_marun(
        ["run", "--mode", "ascend", "--", script.name],
        env={"RANK_TABLE_FILE": str(table), "RANK_ID": "0", "MARUN_RANKTABLE_TIMEOUT": "1"},
        cwd=script.parent,
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    last = res.stderr.splitlines()[-1]
    assert f"rank table {table}:" in last
    assert "status is still 'initializing' after waiting 1s" in last
    assert "MARUN_RANKTABLE_TIMEOUT" in last
    assert sorted(os.listdir(script.parent)) == ["rank_table.json", "train.py"]


@pytest.mark.parametrize(
    ("mode", "env", "then"),
    [
        ("ascend", {"RANK_ID": "3"}, "then plans rank 3's process on its device from it"),
        ("ascend", {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1"}, "one process per device"),
        ("mindspore", {"RANK_ID": "2"}, "then plans rank 2's worker (on rank 0 the scheduler"),
        ("mindspore", {"VC_TASK_INDEX": "0"}, "the scheduler and one worker per device"),
        ("auto", {"RANK_ID": "0", "MARUN_PER_NODE": "1"}, "one process per device"),
    ],
)
def test_plan_never_waits_for_an_initializing_table(
    script: Path, mode: str, env: dict[str, str], then: str
) -> None:
    # The README's promise: a dry run never waits. ranktable_timeout is an hour; the plan comes
    # at once, with what run would do instead.
    table = script.parent / "rank_table.json"
    table.write_text(_initializing())
    res = run_marun(
        ["plan", "--mode", mode, "--format", "json", "--", script.name],
        env={"RANK_TABLE_FILE": str(table), "MARUN_RANKTABLE_TIMEOUT": "3600", **env},
        cwd=script.parent,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["mode"] == ("ascend" if mode == "auto" else mode)
    (node,) = data["nodes"]
    assert node["processes"] == []
    assert node["index"] == int(env.get("VC_TASK_INDEX", "0"))
    assert "coordination" not in data  # the table says who node 0 is; run reads it
    (note,) = data["notes"]
    assert f"rank table {table}: status is 'initializing'" in note
    assert "marun run waits for 'completed', up to ranktable_timeout=3600s" in note
    assert then in note
    assert "waiting for rank table" not in res.stderr
    assert sorted(os.listdir(script.parent)) == ["rank_table.json", "train.py"]


def test_a_torn_rewrite_after_initializing_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the table was seen initializing, an unparseable read is the platform's rewrite in
    flight: keep waiting. The torn rewrite comes right after the loader's first read (which saw
    the table initializing), before its second: the very next read, the retry loop's first,
    lands on it (before, that read was bad input, on a busy machine's timing). The torn state
    comes only after a read saw the table initializing: found first it is bad input."""
    table = tmp_path / "rank_table.json"
    table.write_text(_initializing())
    first_read, torn = threading.Event(), threading.Event()
    read = ranktable_platform.read_table_text

    def read_then_say(path: str) -> str:
        text = read(path)
        if not first_read.is_set():
            first_read.set()
            assert torn.wait(30), "the platform's rewrite begins"
        return text

    monkeypatch.setattr(ranktable_platform, "read_table_text", read_then_say)

    def rewrite() -> None:
        assert first_read.wait(30), "the loader reads the table"
        _replace(table, '{"status": "compl')
        torn.set()
        time.sleep(0.5)
        _replace(table, (TABLES / "server_list_2x2.json").read_text())

    writer = _later(0.0, rewrite)
    loaded = load_rank_table(str(table), timeout=30, interval=0.05)
    writer.join()
    assert loaded.rank_size == 4


def test_a_bad_table_is_not_waited_on(tmp_path: Path) -> None:
    """Only `initializing` is worth waiting for: a broken table fails on the first read."""
    table = tmp_path / "rank_table.json"
    table.write_text('{"status": "completed"')
    with pytest.raises(InputError, match="not valid JSON"):
        load_rank_table(str(table), timeout=3600, interval=3600)


def test_reserve_host_nic_ip_is_not_an_address() -> None:
    """MindSpore's example tables write `"host_nic_ip": "reserve"`, a placeholder."""
    text = json.dumps(
        {
            "version": "1.0",
            "server_count": "1",
            "server_list": [
                {
                    "server_id": "node-a",
                    "host_nic_ip": "reserve",
                    "device": [{"device_id": "0", "device_ip": "192.0.2.1", "rank_id": "0"}],
                }
            ],
            "status": "completed",
        }
    )
    table = parse_rank_table(text, "t.json")
    assert table.servers[0].host_ip is None


# -- device layouts the platform allocates ----------------------------------------------------


def _table_of(counts: list[int]) -> str:
    rank = 0
    servers = []
    for s, count in enumerate(counts):
        devices = []
        for d in range(count):
            devices.append(
                {"device_id": str(d), "device_ip": f"29.{s}.0.{d}", "rank_id": str(rank)}
            )
            rank += 1
        servers.append({"server_id": f"192.0.2.{s + 1}", "device": devices})
    return json.dumps(
        {"status": "completed", "server_count": str(len(servers)), "server_list": servers}
    )


@pytest.mark.parametrize("counts", [[1], [2], [4], [8], [8, 8], [8] * 5])
def test_layouts_the_platform_allocates_plan_without_a_note(counts: list[int]) -> None:
    assert layout_notes(parse_rank_table(_table_of(counts), "t.json")) == []


@pytest.mark.parametrize(
    ("counts", "says"),
    [
        ([3], "server 192.0.2.1 has 3 devices; the platform allocates 1, 2, 4 or 8 devices"),
        ([16], "server 192.0.2.1 has 16 devices"),
        ([4, 4], "2 of 2 servers do not have 8 devices (192.0.2.1 has 4, 192.0.2.2 has 4)"),
        ([8, 2], "1 of 2 servers do not have 8 devices (192.0.2.2 has 2)"),
        ([1] * 5, "5 of 5 servers do not have 8 devices (192.0.2.1 has 1, 192.0.2.2 has 1, "),
    ],
)
def test_layouts_the_platform_does_not_allocate_are_a_note(counts: list[int], says: str) -> None:
    # A note, not a refusal: simulations (2 x 2), hand-written tables and servers with other
    # device counts are real; the note says what the platform and HCCL expect.
    (note,) = layout_notes(parse_rank_table(_table_of(counts), "t.json"))
    assert note.startswith("rank table t.json: ")
    assert says in note
    if len(counts) == 5:
        assert "and 2 more" in note


def test_a_three_device_table_plans_with_the_note(script: Path) -> None:
    table = script.parent / "rank_table.json"
    table.write_text(_table_of([3]))
    res = run_marun(
        ["plan", "--mode", "ascend", "--per-node", "--format", "json", "--", script.name],
        env={"RANK_TABLE_FILE": str(table)},
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert len(data["nodes"][0]["processes"]) == 3
    assert any("has 3 devices" in note for note in data["notes"])


def test_group_list_server_num_counts_servers_not_instances() -> None:
    # The tutorial's table: 8 one-device instances on one server, server_num "1".
    table = parse_rank_table((TABLES / "ascend_tutorial_1x8.json").read_text(), "t.json")
    assert len(table.servers) == 1


@pytest.mark.parametrize(
    ("ids", "note"),
    [
        ([0, 1], False),
        ([2, 3], False),
        ([4, 5], False),
        ([4, 5, 6, 7], False),
        ([3, 4], True),
        ([2, 3, 4, 5], True),
        ([0, 7], True),
        ([0, 1, 2, 3, 4, 5, 6, 7], False),
    ],
)
def test_two_or_four_devices_across_the_groups_of_four_are_a_note(
    ids: list[int], note: bool
) -> None:
    """Part 19, item 12: a server's devices 0-3 and 4-7 are two groups; the platform gives a job
    of 2 or 4 devices on a server devices of one group."""
    devices = [
        {"device_id": str(d), "device_ip": f"29.0.0.{d}", "rank_id": str(r)}
        for r, d in enumerate(ids)
    ]
    table = {
        "status": "completed",
        "server_count": "1",
        "server_list": [{"server_id": "192.0.2.1", "device": devices}],
    }
    notes = layout_notes(parse_rank_table(json.dumps(table), "t.json"))
    assert bool(notes) == note, notes
    if note:
        assert f"devices {','.join(map(str, ids))} span both groups of 4 (0-3 and 4-7)" in notes[0]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"para_plane_nic_num": "4"}, "para_plane_nic_num='4' but server '10.*.*.*' lists 8"),
        (
            {"para_plane_nic_name": ["eth0", "eth1"]},
            "para_plane_nic_num='8' but para_plane_nic_name names 2 NIC(s)",
        ),
    ],
)
def test_para_plane_nic_num_is_checked_against_the_devices(
    change: dict[str, Any], says: str
) -> None:
    """Part 19, item 12: checked as device_num and instance_count are."""
    data = json.loads((TABLES / "ascend_tutorial_1x8.json").read_text())
    assert len(parse_rank_table(json.dumps(data), "t.json").servers[0].devices) == 8
    with pytest.raises(InputError) as caught:
        parse_rank_table(json.dumps({**data, **change}), "t.json")
    assert says in str(caught.value)
