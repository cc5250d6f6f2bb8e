"""The `mindspore` mode: a MindSpore dynamic cluster planned from the node variables or from an
Ascend rank table, checked against hand-written launch scripts as MindSpore's tutorials write
them (tests/data/mindspore_launch), the exact env of every process through the real CLI, and
every bad input through the real CLI.

Nothing here needs MindSpore or an NPU: these are plans (the run is tested end to end elsewhere).
Host names are resolved for real: `localhost` through /etc/hosts, and names under `.invalid`,
which never resolve (RFC 6761).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA, run_marun
from marun.inputs.injected import read_platform
from marun.inputs.settings import Settings
from marun.plan.launch_plan import LaunchPlan, ProcessSpec
from marun.plan.modes.mindspore import plan

IFNAMES_LO = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", "HCCL_SOCKET_IFNAME": "lo"}


def _plan(env: dict[str, str], cwd: Path, all_nodes: bool = False, **settings: Any) -> LaunchPlan:
    platform = read_platform(
        ["train.py"], env=env, cwd=str(cwd), settings=Settings(nic="lo", **settings)
    )
    return plan(platform, all_nodes)


def _cli_plan(cwd: Path, env: dict[str, str], *options: str) -> dict[str, Any]:
    res = run_marun(
        ["plan", "--mode", "mindspore", "--format", "json", *options, "--", "train.py"],
        env=env,
        cwd=cwd,
    )
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def _by_log(launch: LaunchPlan) -> dict[str, ProcessSpec]:
    return {Path(p.log).name: p for node in launch.nodes for p in node.processes}


# -- MindSpore's hand-written launch scripts, run in miniature ------------------------------------

_EXPORT = re.compile(r"^export (\w+)=(.*?)\s*(?:#.*)?$")
_LOOP = re.compile(r"^for\(\(i=(\d+);i<(\d+);i\+\+\)\);?$")
_START = re.compile(r"^(?:python|pytest)\b.*>\s*(\S+)\s+2>&1")


LAUNCH_SCRIPTS = DATA / "mindspore_launch"


def _run_launch_script(name: str) -> dict[str, dict[str, str]]:
    """What a launch script starts: the log file of each process -> the MS_* variables
    exported when it starts. A loop's exports stay in the loop: that is the tutorials' intent
    (in bash they leak, so the scheduler started after the workers' loop gets MS_NODE_ID=7)."""
    env: dict[str, str] = {}
    started: dict[str, dict[str, str]] = {}

    def step(line: str, env: dict[str, str]) -> None:
        export = _EXPORT.match(line)
        if export:
            env[export[1]] = export[2]
        start = _START.match(line)
        if start:
            started[Path(start[1]).name] = {k: v for k, v in env.items() if k.startswith("MS_")}

    script = (LAUNCH_SCRIPTS / name).read_text(encoding="utf-8")
    lines = [line.strip() for line in script.splitlines()]
    k = 0
    while k < len(lines):
        loop = _LOOP.match(lines[k])
        if loop:
            end = lines.index("done", k)
            for i in range(int(loop[1]), int(loop[2])):
                scoped = dict(env)
                for line in lines[k + 2 : end]:  # the body, after `do`
                    step(line.replace("$i", str(i)), scoped)
            k = end + 1
        else:
            step(lines[k], env)
            k += 1
    return started


NODE0 = "192.0.2.11"
NODE1 = "192.0.2.12"
TWO_NODES = {"MA_NUM_HOSTS": "2", "MA_NUM_GPUS": "4", "VC_WORKER_HOSTS": f"{NODE0},{NODE1}"}
RECOVERY = {"MS_ENABLE_RECOVERY": "1", "MS_RECOVERY_PATH": "/path/to/recovery/"}

# (id, the launch script, what the platform gives marun for the same job)
LAUNCH_CASES = [
    ("one machine, 8 workers", "one_node_8_workers.sh", {"MA_NUM_GPUS": "8"}),
    (
        "two machines, the first (scheduler + workers 0-3)",
        "two_nodes_node0.sh",
        {**TWO_NODES, "VC_TASK_INDEX": "0"},
    ),
    (
        "two machines, the second (workers 4-7)",
        "two_nodes_node1.sh",
        {**TWO_NODES, "VC_TASK_INDEX": "1"},
    ),
    (
        "one machine, 8 workers, disaster recovery",
        "one_node_8_workers_recovery.sh",
        {"MA_NUM_GPUS": "8", **RECOVERY},
    ),
]


def test_every_launch_script_is_checked() -> None:
    assert sorted(c[1] for c in LAUNCH_CASES) == sorted(p.name for p in LAUNCH_SCRIPTS.glob("*.sh"))


@pytest.mark.parametrize(
    ("script", "env"), [c[1:] for c in LAUNCH_CASES], ids=[c[0] for c in LAUNCH_CASES]
)
def test_launch_script_layouts(tmp_path: Path, script: str, env: dict[str, str]) -> None:
    (tmp_path / "train.py").write_text("")
    started = _run_launch_script(script)
    ours = _by_log(_plan(env, tmp_path))
    # msrun's log names are the tutorials': the same processes, named alike.
    assert sorted(ours) == sorted(started)
    for log, script_env in started.items():
        proc = ours[log]
        expected = {k: v.replace("$NODE0_IP", NODE0) for k, v in script_env.items()}
        if expected.get("MS_NODE_ID", "").startswith("worker_"):
            # The recovery script names workers worker_<i>; marun gives the rank itself, which
            # is as stable and also pins the rank (msrun does the same).
            expected["MS_NODE_ID"] = expected["MS_NODE_ID"].removeprefix("worker_")
        assert {k: proc.env[k] for k in expected} == expected, log
        assert proc.env["RANK_SIZE"] == proc.env["MS_WORKER_NUM"]
        assert proc.env["MS_TOPO_TIMEOUT"] == "600"
        if proc.role == "worker":
            assert proc.env["RANK_ID"] == proc.env["MS_NODE_ID"] == str(proc.rank)
            assert proc.name == f"worker{proc.rank}"
        else:
            assert (proc.name, proc.rank, proc.env["RANK_ID"]) == ("scheduler", None, "0")
    assert "MS_SERVER_NUM" not in str([p.env for p in ours.values()])


def test_single_node_scheduler_is_first_and_devices_are_local(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    (node,) = _plan({"MA_NUM_GPUS": "8"}, tmp_path).nodes
    assert [p.name for p in node.processes] == ["scheduler"] + [f"worker{i}" for i in range(8)]
    assert [p.env.get("DEVICE_ID") for p in node.processes] == [None] + [str(i) for i in range(8)]
    for proc in node.processes:
        assert proc.argv == (sys.executable, str(tmp_path / "train.py"))
        assert proc.cwd == str(tmp_path)
        assert Path(proc.log).parent == tmp_path / "marun_logs"


# -- two nodes x two workers, exact env through the real CLI -------------------------------------


def _expected_2x2(sched_host: str, this_node: int) -> list[dict[str, Any]]:
    base = {
        "MS_SCHED_HOST": sched_host,
        "MS_SCHED_PORT": "8118",
        "MS_WORKER_NUM": "4",
        "MS_TOPO_TIMEOUT": "600",
        "RANK_SIZE": "4",
        "OMP_NUM_THREADS": "1",  # as msrun's processes see it
    }

    def nic(node: int) -> dict[str, str]:
        return IFNAMES_LO if node == this_node else {}

    def worker(node: int, rank: int, device: int) -> dict[str, Any]:
        env = {"MS_ROLE": "MS_WORKER", "MS_NODE_ID": str(rank), **base}
        env |= {"RANK_ID": str(rank), "DEVICE_ID": str(device), **nic(node)}
        return {
            "name": f"worker{rank}",
            "role": "worker",
            "rank": rank,
            "env": env,
            "log": f"worker_{rank}.log",
        }

    scheduler = {
        "name": "scheduler",
        "role": "scheduler",
        "rank": None,
        "log": "scheduler.log",
        "env": {"MS_ROLE": "MS_SCHED", **base, "RANK_ID": "0", **nic(0)},
    }
    return [
        {"index": 0, "host": NODE0, "processes": [scheduler, worker(0, 0, 0), worker(0, 1, 1)]},
        {"index": 1, "host": NODE1, "processes": [worker(1, 2, 0), worker(1, 3, 1)]},
    ]


def _shape(data: dict[str, Any], cwd: Path) -> list[dict[str, Any]]:
    """The JSON plan's nodes, with argv/cwd/log checked and the log reduced to its name."""
    nodes = []
    for node in data["nodes"]:
        assert node["files"] == []
        procs = []
        for p in node["processes"]:
            assert p["argv"] == [sys.executable, str(cwd / "train.py")]
            assert p["cwd"] == str(cwd)
            assert Path(p["log"]).parent == cwd / "marun_logs"
            assert p["daemon"] is False
            procs.append(
                {k: p[k] for k in ("name", "role", "rank", "env")} | {"log": Path(p["log"]).name}
            )
        nodes.append({"index": node["index"], "host": node["host"], "processes": procs})
    return nodes


@pytest.mark.parametrize("this_node", [0, 1])
def test_two_nodes_all_nodes_exact_env(script: Path, this_node: int) -> None:
    env = {
        "MA_NUM_HOSTS": "2",
        "MA_NUM_GPUS": "2",
        "VC_TASK_INDEX": str(this_node),
        "VC_WORKER_HOSTS": f"{NODE0},{NODE1}",
        "MA_VJ_NAME": "job",
        "MA_TASK_NAME": "worker",
    }
    data = _cli_plan(script.parent, env, "--all-nodes", "--nic", "lo")
    assert (data["mode"], data["notes"]) == ("mindspore", [])
    assert _shape(data, script.parent) == _expected_2x2(NODE0, this_node)
    worker3 = data["nodes"][1]["processes"][1]
    assert worker3["env"] == {
        "MS_ROLE": "MS_WORKER",
        "MS_NODE_ID": "3",
        "MS_SCHED_HOST": NODE0,
        "MS_SCHED_PORT": "8118",
        "MS_WORKER_NUM": "4",
        "MS_TOPO_TIMEOUT": "600",
        "RANK_SIZE": "4",
        "OMP_NUM_THREADS": "1",
        "RANK_ID": "3",
        "DEVICE_ID": "1",
        **(IFNAMES_LO if this_node == 1 else {}),
    }


def test_node1_plans_only_its_workers(script: Path) -> None:
    env = {
        "MA_NUM_HOSTS": "2",
        "MA_NUM_GPUS": "2",
        "VC_TASK_INDEX": "1",
        "VC_WORKER_HOSTS": f"{NODE0},{NODE1}",
    }
    data = _cli_plan(script.parent, env, "--nic", "lo")
    assert _shape(data, script.parent) == _expected_2x2(NODE0, 1)[1:]


# -- where node 0's address comes from -----------------------------------------------------------

UNRESOLVABLE = {"MA_VJ_NAME": "job.invalid", "MA_TASK_NAME": "worker"}  # names never resolve


@pytest.mark.parametrize(
    ("env", "all_nodes", "sched_host"),
    [
        # node 1 resolves node 0's name (for real, through /etc/hosts)
        ({"VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": "localhost,node1.invalid"}, False, "127.0.0.1"),
        # node 0 names its own NIC's address (--nic lo here), not its name
        ({"VC_TASK_INDEX": "0", **UNRESOLVABLE}, False, "127.0.0.1"),
        ({"VC_TASK_INDEX": "0", **UNRESOLVABLE}, True, "127.0.0.1"),
        # the user's MS_SCHED_HOST wins, and nothing is resolved
        ({"VC_TASK_INDEX": "1", **UNRESOLVABLE, "MS_SCHED_HOST": "10.9.9.9"}, False, "10.9.9.9"),
        (
            {
                "VC_TASK_INDEX": "0",
                "VC_WORKER_HOSTS": f"{NODE0},{NODE1}",
                "MS_SCHED_HOST": "10.9.9.9",
            },
            True,
            "10.9.9.9",
        ),
        # one node: loopback, as the tutorials and msrun do
        ({"MA_NUM_HOSTS": "1", "VC_WORKER_HOSTS": NODE0}, False, "127.0.0.1"),
    ],
)
def test_scheduler_address(
    tmp_path: Path, env: dict[str, str], all_nodes: bool, sched_host: str
) -> None:
    (tmp_path / "train.py").write_text("")
    launch = _plan({"MA_NUM_HOSTS": "2", **env}, tmp_path, all_nodes, resolve_timeout=5.0)
    hosts = {p.env["MS_SCHED_HOST"] for node in launch.nodes for p in node.processes}
    assert hosts == {sched_host}
    assert launch.notes == ()


def test_all_nodes_keeps_an_unresolvable_name_with_a_note(script: Path) -> None:
    env = {
        "MA_NUM_HOSTS": "2",
        "VC_TASK_INDEX": "1",
        **UNRESOLVABLE,
        "MARUN_RESOLVE_TIMEOUT": "0.2",
    }
    data = _cli_plan(script.parent, env, "--all-nodes", "--nic", "lo")
    name = "job.invalid-worker-0.job.invalid"
    assert [n["host"] for n in data["nodes"]] == [name, "job.invalid-worker-1.job.invalid"]
    assert {p["env"]["MS_SCHED_HOST"] for n in data["nodes"] for p in n["processes"]} == {name}
    (note,) = data["notes"]
    assert name in note and "resolves it" in note


def test_dry_run_of_another_node_never_waits_for_node_0s_name(script: Path) -> None:
    """`marun plan` on node 1 outside the cluster: the plan at once, the name kept, a note."""
    env = {"MA_NUM_HOSTS": "2", "MA_NUM_GPUS": "2", "VC_TASK_INDEX": "1", **UNRESOLVABLE}
    data = _cli_plan(script.parent, env, "--nic", "lo")  # resolve_timeout stays 300 s
    name = "job.invalid-worker-0.job.invalid"
    assert [n["index"] for n in data["nodes"]] == [1]
    assert {p["env"]["MS_SCHED_HOST"] for p in data["nodes"][0]["processes"]} == {name}
    (note,) = data["notes"]
    assert name in note and "does not wait" in note


def test_run_waits_for_node_0s_name_then_exit_2(script: Path) -> None:
    """`marun run` keeps the bounded wait, and ends with one line when the name never comes."""
    env = {
        "MA_NUM_HOSTS": "2",
        "MA_NUM_GPUS": "2",
        "VC_TASK_INDEX": "1",
        **UNRESOLVABLE,
        "MARUN_RESOLVE_TIMEOUT": "0.2",
    }
    before = sorted(script.parent.rglob("*"))
    res = run_marun(
        ["run", "--mode", "mindspore", "--nic", "lo", "--", script.name], env, script.parent
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert "MS_SCHED_HOST: node 0's host 'job.invalid-worker-0.job.invalid' did not resolve" in (
        res.stderr
    )
    assert res.stdout == ""
    assert sorted(script.parent.rglob("*")) == before


def test_engine_variables_from_env_and_settings(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    given = {"MS_SCHED_PORT": "9000", "MS_TOPO_TIMEOUT": "5"}
    procs = list(_by_log(_plan(given, tmp_path)).values())
    assert {(p.env["MS_SCHED_PORT"], p.env["MS_TOPO_TIMEOUT"]) for p in procs} == {("9000", "5")}
    procs = list(_by_log(_plan({}, tmp_path, ms_sched_port=7000, ms_topo_timeout=30)).values())
    assert {(p.env["MS_SCHED_PORT"], p.env["MS_TOPO_TIMEOUT"]) for p in procs} == {("7000", "30")}


def test_user_socket_ifname_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    procs = _by_log(_plan({"NCCL_SOCKET_IFNAME": "ib0"}, tmp_path)).values()
    for proc in procs:
        assert "NCCL_SOCKET_IFNAME" not in proc.env
        assert proc.env["GLOO_SOCKET_IFNAME"] == proc.env["HCCL_SOCKET_IFNAME"] == "lo"


# -- recovery ------------------------------------------------------------------------------------


def test_recovery_env_on_every_process_of_every_node(script: Path) -> None:
    env = {
        "MA_NUM_HOSTS": "2",
        "MA_NUM_GPUS": "2",
        "VC_TASK_INDEX": "0",
        "VC_WORKER_HOSTS": f"{NODE0},{NODE1}",
        "MS_ENABLE_RECOVERY": "1",
        "MS_RECOVERY_PATH": "./recovery/",
    }
    data = _cli_plan(script.parent, env, "--all-nodes")
    procs = {p["name"]: p["env"] for n in data["nodes"] for p in n["processes"]}
    assert sorted(procs) == ["scheduler", "worker0", "worker1", "worker2", "worker3"]
    for name, penv in procs.items():
        assert (penv["MS_ENABLE_RECOVERY"], penv["MS_RECOVERY_PATH"]) == ("1", "./recovery/")
        assert penv["MS_NODE_ID"] == ("sched" if name == "scheduler" else name[len("worker") :])


def test_recovery_off_sets_nothing(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    env = {"MS_ENABLE_RECOVERY": "0", "MS_RECOVERY_PATH": "/r"}
    for proc in _by_log(_plan(env, tmp_path)).values():
        assert not {"MS_ENABLE_RECOVERY", "MS_RECOVERY_PATH"} & set(proc.env)
        assert proc.env.get("MS_NODE_ID") != "sched"


def _notes(tmp_path: Path, env: dict[str, str], all_nodes: bool = False) -> list[str]:
    (tmp_path / "train.py").write_text("")
    return list(_plan(env, tmp_path, all_nodes).notes)


TWO_NODES = {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": f"{NODE0},{NODE1}"}


@pytest.mark.parametrize("all_nodes", [False, True])
def test_a_relative_recovery_path_on_several_nodes_is_a_note(
    tmp_path: Path, all_nodes: bool
) -> None:
    env = {**TWO_NODES, "MS_ENABLE_RECOVERY": "1", "MS_RECOVERY_PATH": "./recovery/"}
    (note,) = _notes(tmp_path, env, all_nodes)
    assert note == (
        "MS_RECOVERY_PATH='./recovery/' is relative, on a job of 2 nodes: each node resolves it "
        "in its own working directory, but recovery needs one directory every node shares (an "
        "absolute path on a shared volume)"
    )
    # An absolute path (a shared volume, as far as marun can tell) and one node: no note.
    assert _notes(tmp_path, {**env, "MS_RECOVERY_PATH": "/shared/recovery"}, all_nodes) == []
    assert _notes(tmp_path, {"MS_ENABLE_RECOVERY": "1", "MS_RECOVERY_PATH": "r"}) == []


def test_a_relative_recovery_path_from_a_rank_table_counts_its_servers(tmp_path: Path) -> None:
    env = {
        "RANK_TABLE_FILE": str(DATA / "ranktables" / "server_list_2x2.json"),
        "RANK_ID": "2",
        "MS_ENABLE_RECOVERY": "1",
        "MS_RECOVERY_PATH": "ckpt",
    }
    assert any("on a job of 2 nodes" in note for note in _notes(tmp_path, env))


def test_recovery_on_a_cpu_only_job_is_a_note(tmp_path: Path) -> None:
    env = {"MA_NUM_GPUS": "0", "MS_ENABLE_RECOVERY": "1", "MS_RECOVERY_PATH": "/r"}
    (note,) = _notes(tmp_path, env)
    assert note.startswith("MS_ENABLE_RECOVERY=1 on a CPU-only job (MA_NUM_GPUS=0): MindSpore")
    assert "for GPU and Ascend" in note
    assert _notes(tmp_path, {**env, "MA_NUM_GPUS": "1"}) == []
    assert _notes(tmp_path, {**env, "MS_ENABLE_RECOVERY": "0"}) == []


@pytest.mark.parametrize(
    ("value", "noted"), [("1", False), ("0", False), ("yes", True), (" 2", True)]
)
def test_ms_hccl_cm_init_other_than_1_or_0_is_a_note(
    tmp_path: Path, value: str, noted: bool
) -> None:
    notes = _notes(tmp_path, {"MS_HCCL_CM_INIT": value})
    assert notes == (
        [
            f"MS_HCCL_CM_INIT={value!r}: MindSpore documents 1 (HCCL through the dynamic cluster) "
            "and 0 (off); passed on as it is, and MindSpore may take another value for off"
        ]
        if noted
        else []
    )


@pytest.mark.parametrize(
    "given",
    [
        {"MS_RETRY_INTERVAL_LOWER": "1", "MS_RETRY_INTERVAL_UPPER": "1"},
        {"MS_RETRY_INTERVAL_LOWER": " 2 ", "MS_RETRY_INTERVAL_UPPER": ""},  # "": MindSpore's 5
        {"MS_RETRY_INTERVAL_UPPER": "30"},
    ],
)
def test_mindspore_retry_intervals_in_range_pass_through_untouched(
    tmp_path: Path, given: dict[str, str]
) -> None:
    """MindSpore's own knobs (a round's formation is faster with shorter ones: docs/engines):
    checked, never set or changed by marun; each process inherits them as given."""
    (tmp_path / "train.py").write_text("")
    launch = _plan(given, tmp_path)
    assert launch.notes == ()
    for node in launch.nodes:
        for proc in node.processes:
            assert not any(k.startswith("MS_RETRY_INTERVAL") for k in proc.env), proc.env


# -- from an Ascend rank table -------------------------------------------------------------------
# Two servers with two devices each, on physical devices 4 and 5 (so DEVICE_ID must come from the
# table, not from the position). `host_nic_ip` is "reserve", as MindSpore's own examples write it:
# the address is the server_id.

SERVER_LIST = {
    "version": "1.0",
    "server_count": "2",
    "server_list": [
        {
            "server_id": server,
            "host_nic_ip": "reserve",
            "device": [
                {
                    "device_id": str(4 + j),
                    "device_ip": f"29.{s}.0.{4 + j}",
                    "rank_id": str(2 * s + j),
                }
                for j in range(2)
            ],
        }
        for s, server in enumerate((NODE0, NODE1))
    ],
    "status": "completed",
}
GROUP_LIST = {
    "group_count": "1",
    "group_list": [
        {
            "device_count": "4",
            "instance_count": "2",
            "group_name": "worker",
            "instance_list": [
                {
                    "pod_name": f"job-worker-{s}",
                    "server_id": server,
                    "devices": [
                        {"device_id": str(4 + j), "device_ip": f"29.{s}.0.{4 + j}"}
                        for j in range(2)
                    ],
                }
                for s, server in enumerate((NODE0, NODE1))
            ],
        }
    ],
    "status": "completed",
}


@pytest.fixture(params=[SERVER_LIST, GROUP_LIST], ids=["server_list", "group_list"])
def rank_table(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "rank_table.json"
    path.write_text(json.dumps(request.param))
    (tmp_path / "train.py").write_text("")
    return path


def test_rank_table_all_nodes_exact_env(rank_table: Path) -> None:
    env = {"RANK_TABLE_FILE": str(rank_table), "VC_TASK_INDEX": "1"}
    data = _cli_plan(rank_table.parent, env, "--all-nodes", "--nic", "lo")
    # 2 devices on each of 2 servers: not what the platform allocates; node 1 by its index.
    layout, chosen = data["notes"]
    assert "2 of 2 servers do not have 8 devices" in layout
    assert chosen.endswith(
        "(#1): VC_TASK_INDEX=1, by position (no server's address is MA_CURRENT_IP)"
    )
    expected = _expected_2x2(NODE0, this_node=1)
    for node in expected:  # the table's physical devices
        for proc in node["processes"]:
            if "DEVICE_ID" in proc["env"]:
                proc["env"]["DEVICE_ID"] = str(4 + int(proc["env"]["DEVICE_ID"]))
    # RANK_TABLE_FILE is inherited, not set: nowhere in the plan's env.
    assert _shape(data, rank_table.parent) == expected


@pytest.mark.parametrize(
    ("env", "per_node", "planned"),
    [
        # The Ascend engine runs marun once per device: rank 0's run also starts the scheduler.
        ({"RANK_ID": "0"}, False, ["scheduler", "worker0"]),
        ({"RANK_ID": "1"}, False, ["worker1"]),
        ({"RANK_ID": "3", "RANK_SIZE": "4"}, False, ["worker3"]),
        # Once per node: every device of this node's server.
        ({"RANK_ID": "3"}, True, ["worker2", "worker3"]),
        ({"VC_TASK_INDEX": "0"}, False, ["scheduler", "worker0", "worker1"]),
        ({"VC_TASK_INDEX": "1", "MA_NUM_HOSTS": "2"}, False, ["worker2", "worker3"]),
    ],
)
def test_rank_table_this_node(
    rank_table: Path, env: dict[str, str], per_node: bool, planned: list[str]
) -> None:
    launch = _plan(
        {"RANK_TABLE_FILE": str(rank_table), **env}, rank_table.parent, per_node=per_node
    )
    (node,) = launch.nodes
    assert [p.name for p in node.processes] == planned
    assert node.host == (NODE0 if "scheduler" in planned or "worker1" in planned else NODE1)
    for proc in node.processes:
        assert proc.env["MS_SCHED_HOST"] == NODE0
        assert proc.env["MS_WORKER_NUM"] == proc.env["RANK_SIZE"] == "4"
        assert proc.env["GLOO_SOCKET_IFNAME"] == "lo"
        if proc.role == "worker":
            assert proc.env["DEVICE_ID"] == str(4 + (proc.rank or 0) % 2)


def test_rank_table_dry_run_elsewhere_plans_every_server(rank_table: Path) -> None:
    # No RANK_ID, no node index, and none of the table's addresses is this machine's: a dry-run
    # on a laptop. Every server is planned; no process gets this machine's NIC.
    launch = _plan({"RANK_TABLE_FILE": str(rank_table)}, rank_table.parent, all_nodes=True)
    assert [n.host for n in launch.nodes] == [NODE0, NODE1]
    procs = [p for n in launch.nodes for p in n.processes]
    assert [p.name for p in procs] == ["scheduler", "worker0", "worker1", "worker2", "worker3"]
    assert not any("GLOO_SOCKET_IFNAME" in p.env for p in procs)
    assert len(launch.notes) == 2  # which server this is; 2 devices a server, not 8


def test_rank_table_one_server_uses_loopback(tmp_path: Path) -> None:
    table = {**SERVER_LIST, "server_count": "1", "server_list": SERVER_LIST["server_list"][:1]}
    (tmp_path / "t.json").write_text(json.dumps(table))
    (tmp_path / "train.py").write_text("")
    launch = _plan({"RANK_TABLE_FILE": "t.json"}, tmp_path)
    assert [p.name for p in launch.nodes[0].processes] == ["scheduler", "worker0", "worker1"]
    assert {p.env["MS_SCHED_HOST"] for p in launch.nodes[0].processes} == {"127.0.0.1"}


# -- bad input: exit 2, one line naming the variable and the value, nothing written --------------

BAD_INPUTS = [
    ({"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "one"}, "VC_TASK_INDEX='one': expected an integer"),
    ({"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "2"}, "VC_TASK_INDEX='2': expected an index below"),
    ({"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "-1"}, "VC_TASK_INDEX='-1'"),
    ({"MA_NUM_HOSTS": "2"}, "MA_NUM_HOSTS=2 but none of MA_TASK_INDEX, VC_TASK_INDEX"),
    ({"MS_SCHED_HOST": "node0.job"}, "MS_SCHED_HOST='node0.job': expected an IPv4 address"),
    ({"MS_SCHED_HOST": "fe80::1"}, "MS_SCHED_HOST='fe80::1': expected an IPv4 address"),
    ({"MS_ENABLE_RECOVERY": "1"}, "MS_RECOVERY_PATH=None: expected a directory"),
    ({"MS_ENABLE_RECOVERY": "1", "MS_RECOVERY_PATH": " "}, "MS_RECOVERY_PATH=' ': expected"),
    ({"MS_ENABLE_RECOVERY": "yes"}, "MS_ENABLE_RECOVERY='yes': expected 1 (on) or 0 (off)"),
    ({"MS_SCHED_PORT": "80"}, "MS_SCHED_PORT='80': expected an integer from 1024 to 65535"),
    (
        {"MARUN_MS_SCHED_PORT": "70000"},
        "MARUN_MS_SCHED_PORT='70000': expected an integer from 1024",
    ),
    ({"MS_SCHED_PORT": "²"}, "MS_SCHED_PORT='²': expected an integer from 1024 to 65535"),
    ({"MS_TOPO_TIMEOUT": "-5"}, "MS_TOPO_TIMEOUT='-5': expected an integer from 1 to"),
    ({"MS_TOPO_TIMEOUT": "0"}, "MS_TOPO_TIMEOUT='0': expected an integer from 1 to"),
    ({"MS_TOPO_TIMEOUT": "nan"}, "MS_TOPO_TIMEOUT='nan': expected an integer from 1 to"),
    ({"MARUN_MS_TOPO_TIMEOUT": "-5"}, "MARUN_MS_TOPO_TIMEOUT='-5': expected an integer from 1"),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": f"a;b,{NODE1}"},
        "VC_WORKER_HOSTS entry='a;b': expected a host name",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": f"-oProxyCommand=x,{NODE1}"},
        "VC_WORKER_HOSTS entry='-oProxyCommand=x': expected a host name",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": f"a..b,{NODE1}"},
        "VC_WORKER_HOSTS entry='a..b': expected a host name",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": "x" * 64 + f".job,{NODE1}"},
        "VC_WORKER_HOSTS entry='" + "x" * 64 + ".job': expected a host name",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "MA_VJ_NAME": "job;rm", "VC_WORKER_HOSTS": ""},
        "VC_WORKER_HOSTS='': expected",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "MA_VJ_NAME": "a..b"},
        "host name='a..b-worker-0.a..b': expected a host name",
    ),
    ({"MS_TOPO_TIMEOUT": "soon"}, "MS_TOPO_TIMEOUT='soon': expected an integer"),
    ({"MS_RETRY_INTERVAL_LOWER": "0"}, "MS_RETRY_INTERVAL_LOWER='0': expected an integer from 1"),
    ({"MS_RETRY_INTERVAL_UPPER": "0.5"}, "MS_RETRY_INTERVAL_UPPER='0.5': expected an integer"),
    ({"MS_RETRY_INTERVAL_UPPER": " "}, "MS_RETRY_INTERVAL_UPPER=' ': expected an integer"),
    (
        {"MS_RETRY_INTERVAL_LOWER": "4", "MS_RETRY_INTERVAL_UPPER": "2"},
        "MS_RETRY_INTERVAL_LOWER='4': expected at most 2 (MS_RETRY_INTERVAL_UPPER)",
    ),
    (
        {"MS_RETRY_INTERVAL_LOWER": "7"},
        "MS_RETRY_INTERVAL_LOWER='7': expected at most 5 (MS_RETRY_INTERVAL_UPPER, MindSpore's",
    ),
    (
        {"MS_RETRY_INTERVAL_UPPER": "1"},
        "MS_RETRY_INTERVAL_UPPER='1': expected at least 3 (MS_RETRY_INTERVAL_LOWER, MindSpore's",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": ""},
        "VC_WORKER_HOSTS='': expected a comma-separated list of host names",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": " , "},
        "VC_WORKER_HOSTS=' , ': expected a comma-separated list",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": NODE0},
        f"VC_WORKER_HOSTS lists 1 host(s) ({NODE0}): expected MA_NUM_HOSTS=2",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": f"{NODE0},{NODE1},10.0.0.3"},
        "VC_WORKER_HOSTS lists 3 host(s)",
    ),
    (
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": f"fe80::1,{NODE1}"},
        "node 0's host='fe80::1': expected an IPv4 address or a host name",
    ),
    ({"RANK_TABLE_FILE": "missing.json"}, "RANK_TABLE_FILE='missing.json': expected an existing"),
    ({"RANK_TABLE_FILE": "t.json", "RANK_SIZE": "8"}, "RANK_SIZE='8': expected 4"),
    ({"RANK_TABLE_FILE": "t.json", "RANK_ID": "4"}, "RANK_ID='4': expected an integer from 0 to 3"),
    (
        {"RANK_TABLE_FILE": "t.json", "MA_NUM_HOSTS": "3", "VC_TASK_INDEX": "0"},
        "MA_NUM_HOSTS='3': expected 2",
    ),
]


@pytest.mark.parametrize(("env", "message"), BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2(script: Path, env: dict[str, str], message: str) -> None:
    (script.parent / "t.json").write_text(json.dumps(SERVER_LIST))
    before = sorted(script.parent.rglob("*"))
    res = run_marun(
        ["plan", "--mode", "mindspore", "--", script.name],
        env={"MA_NUM_GPUS": "2", **env},
        cwd=script.parent,
    )
    assert res.returncode == 2, res.stderr
    assert message in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout == ""
    assert sorted(script.parent.rglob("*")) == before


def test_omp_num_threads_is_one_as_under_msrun_unless_set(script: Path) -> None:
    """msrun's processes see OMP_NUM_THREADS=1 (part 19, item 7); a value the user set is kept
    (the process inherits it)."""
    env = {"MA_NUM_GPUS": "2"}
    data = _cli_plan(script.parent, env, "--nic", "lo")
    assert {p["env"]["OMP_NUM_THREADS"] for p in data["nodes"][0]["processes"]} == {"1"}
    data = _cli_plan(script.parent, {**env, "OMP_NUM_THREADS": "4"}, "--nic", "lo")
    assert all("OMP_NUM_THREADS" not in p["env"] for p in data["nodes"][0]["processes"])
