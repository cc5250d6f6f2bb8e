"""`pytorch` mode: the platform's appended --init_method/--rank/--world_size turned into
torchrun's per-process environment. Plans only: nothing here needs torch or a GPU."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from conftest import run_marun

INIT = "tcp://127.0.0.1:29500"
TWO_NODES = ["--init_method", INIT, "--rank", "1", "--world_size", "2"]
HOSTS = "job-a-worker-0.job-a,job-a-worker-1.job-a"
NODE_ENV = {
    "MA_NUM_HOSTS": "2",
    "MA_NUM_GPUS": "2",
    "VC_TASK_INDEX": "1",
    "MA_VJ_NAME": "job-a",
    "MA_TASK_NAME": "worker",
    "VC_WORKER_HOSTS": HOSTS,
}


def plan(
    script: Path,
    appended: list[str],
    env: dict[str, str] | None = None,
    options: tuple[str, ...] = (),
    user_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    res = run_marun(
        ["plan", "--format", "json", *options, "--", script.name, *user_args, *appended],
        env=env,
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    assert data["mode"] == "pytorch"
    return data


def rank_env(node: int, local: int, nproc: int, nodes: int, run_id: str) -> dict[str, str]:
    """torchrun's worker env for a process (NODE_RANK added: the node rank, kubeflow #1790)."""
    rank = node * nproc + local
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": str(nodes * nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_WORLD_SIZE": str(nodes),
        "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": str(nodes * nproc),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "RANK": str(rank),
        "LOCAL_RANK": str(local),
        "GROUP_RANK": str(node),
        "NODE_RANK": str(node),
        "ROLE_RANK": str(rank),
    }


def test_two_nodes_two_procs_every_rank(script: Path) -> None:
    """The exact env of each rank of a 2-node x 2-process job, seen from node 1."""
    data = plan(script, TWO_NODES, NODE_ENV, ("--all-nodes",))
    nodes = data["nodes"]
    assert [n["index"] for n in nodes] == [0, 1]
    assert nodes[0]["host"] == "job-a-worker-0.job-a"
    assert nodes[1]["host"] == socket.gethostname()  # this node
    for node in nodes:
        procs = node["processes"]
        assert [p["name"] for p in procs] == [f"rank{node['index'] * 2 + i}" for i in range(2)]
        for local, proc in enumerate(procs):
            rank = node["index"] * 2 + local
            expected = rank_env(node["index"], local, 2, 2, "job-a")
            expected["OMP_NUM_THREADS"] = "1"
            expected["TORCHELASTIC_ERROR_FILE"] = (
                f"{script.parent}/marun_logs/rank_{rank}.error.json"
            )
            if node["index"] == 1:
                # 127.0.0.1 is the rendezvous address: its interface is lo.
                expected.update(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")
            assert proc["env"] == expected
            assert proc["rank"] == rank
            assert proc["role"] == "worker"
            assert proc["argv"] == [proc["argv"][0], str(script)]
            assert proc["cwd"] == str(script.parent)
            assert proc["log"] == f"{script.parent}/marun_logs/rank_{rank}.log"
            assert not proc["daemon"]
    assert any("SOCKET_IFNAME" in note and "node 1 only" in note for note in data["notes"])


def test_this_node_only(script: Path) -> None:
    data = plan(script, TWO_NODES, NODE_ENV)
    (node,) = data["nodes"]
    assert node["index"] == 1
    assert node["host"] == socket.gethostname()
    assert [p["env"]["RANK"] for p in node["processes"]] == ["2", "3"]
    assert data["notes"] == []


def test_one_node_init_method_only(script: Path) -> None:
    """One node: the platform appends --init_method only; rank 0 of a world of one node."""
    data = plan(script, ["--init_method", INIT])
    (node,) = data["nodes"]
    (proc,) = node["processes"]
    expected = rank_env(0, 0, 1, 1, "none")
    expected.update(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")
    expected["TORCHELASTIC_ERROR_FILE"] = f"{script.parent}/marun_logs/rank_0.error.json"
    assert proc["env"] == expected  # one process: no OMP_NUM_THREADS, as torchrun
    assert node["index"] == 0


@pytest.mark.parametrize(
    ("gpus", "option", "nproc"),
    [
        (None, None, 1),  # neither: one process
        ("4", None, 4),  # MA_NUM_GPUS
        ("0", None, 1),  # a CPU job: one process
        ("4", "2", 2),  # --nproc-per-node wins over MA_NUM_GPUS
        (None, "3", 3),
    ],
)
def test_processes_per_node(script: Path, gpus: str | None, option: str | None, nproc: int) -> None:
    env = {"MA_NUM_GPUS": gpus} if gpus is not None else {}
    options = ("--nproc-per-node", option) if option else ()
    data = plan(script, ["--init_method", INIT], env, options)
    procs = data["nodes"][0]["processes"]
    assert [p["env"]["LOCAL_RANK"] for p in procs] == [str(i) for i in range(nproc)]
    assert {p["env"]["WORLD_SIZE"] for p in procs} == {str(nproc)}
    assert {p["env"]["LOCAL_WORLD_SIZE"] for p in procs} == {str(nproc)}
    assert all(("OMP_NUM_THREADS" in p["env"]) == (nproc > 1) for p in procs)


def test_user_settings_are_not_overridden(script: Path) -> None:
    """OMP_NUM_THREADS and *_SOCKET_IFNAME the user set are inherited, not replaced."""
    env = {"MA_NUM_GPUS": "2", "OMP_NUM_THREADS": "4", "NCCL_SOCKET_IFNAME": "eth9"}
    procs = plan(script, ["--init_method", INIT], env)["nodes"][0]["processes"]
    for proc in procs:
        assert "OMP_NUM_THREADS" not in proc["env"]
        assert "NCCL_SOCKET_IFNAME" not in proc["env"]
        assert proc["env"]["GLOO_SOCKET_IFNAME"] == "lo"


def _non_loopback_ipv4() -> tuple[str, str] | None:
    import netifaces

    for name in netifaces.interfaces():
        for addr in netifaces.ifaddresses(name).get(netifaces.AF_INET, []):
            if name != "lo" and addr.get("addr"):
                return name, addr["addr"]
    return None


def test_nic_from_the_rendezvous_address_and_options(script: Path) -> None:
    found = _non_loopback_ipv4()
    if found is None:
        pytest.skip("this machine has no non-loopback IPv4 interface")
    name, address = found
    # Node 0's own address as the rendezvous address picks its interface...
    env = plan(script, ["--init_method", f"tcp://{address}:29500"])["nodes"][0]["processes"][0]
    assert env["env"]["NCCL_SOCKET_IFNAME"] == name
    # ... MA_CURRENT_IP (this node's address) comes first ...
    proc = plan(script, ["--init_method", INIT], {"MA_CURRENT_IP": address})["nodes"][0]
    assert proc["processes"][0]["env"]["GLOO_SOCKET_IFNAME"] == name
    # ... and --nic wins over both.
    proc = plan(script, ["--init_method", f"tcp://{address}:1"], options=("--nic", "lo"))
    assert proc["nodes"][0]["processes"][0]["env"]["NCCL_SOCKET_IFNAME"] == "lo"


def test_a_nic_list_gives_each_variable_this_node_s_interfaces_of_it(script: Path) -> None:
    # run_mpi.sh's list form. NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME each take a list; Gloo
    # fails on an interface the node lacks, so each gets the listed interfaces this node has.
    env = {"MARUN_NIC": "nosuch0,lo", "MA_NUM_GPUS": "2"}
    for proc in plan(script, ["--init_method", INIT], env)["nodes"][0]["processes"]:
        assert proc["env"]["NCCL_SOCKET_IFNAME"] == "lo"
        assert proc["env"]["GLOO_SOCKET_IFNAME"] == "lo"


@pytest.mark.parametrize(
    ("value", "addr", "port"),
    [
        (INIT, "127.0.0.1", "29500"),
        ('"tcp://127.0.0.1:29500"', "127.0.0.1", "29500"),  # quotes kept by a non-shell caller
        ("tcp://job-a-worker-0.job-a:6000", "job-a-worker-0.job-a", "6000"),
        ("tcp://[::1]:29500", "::1", "29500"),
        ("tcp://10.0.0.1:65535", "10.0.0.1", "65535"),
    ],
)
def test_init_method_forms(script: Path, value: str, addr: str, port: str) -> None:
    env = plan(script, ["--init_method", value])["nodes"][0]["processes"][0]["env"]
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (addr, port)


def test_keep_platform_args(script: Path) -> None:
    """Part 19, item 3: as the platform starts the file: once per node (MA_NUM_GPUS=2 is the
    script's to spawn), the appended arguments unchanged, none of torchrun's variables."""
    appended = [f"--init_method={INIT}", "--rank", "1", "--world_size", "2"]
    data = plan(script, appended, NODE_ENV, ("--keep-platform-args",), ("--lr", "0.1"))
    (proc,) = data["nodes"][0]["processes"]
    assert proc["argv"][1:] == [str(script), "--lr", "0.1", *appended]
    assert (proc["name"], proc["rank"], proc["log"]) == (
        "node1",
        1,
        f"{script.parent}/marun_logs/node_1.log",
    )
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"} & set(proc["env"])
    assert any("once per node" in note and "MA_NUM_GPUS=2" in note for note in data["notes"])
    everyone = plan(script, appended, NODE_ENV, ("--keep-platform-args", "--all-nodes"))
    assert [len(n["processes"]) for n in everyone["nodes"]] == [1, 1]


@pytest.mark.parametrize(
    ("options", "env"),
    [
        (["--nproc-per-node", "2"], {}),
        ([], {"MARUN_NPROC_PER_NODE": "4"}),
    ],
)
@pytest.mark.parametrize("command", ["plan", "run"])
def test_keep_platform_args_with_more_than_one_process_per_node_is_bad_input(
    command: str, options: list[str], env: dict[str, str], script: Path
) -> None:
    res = run_marun(
        [command, "--keep-platform-args", *options, "--", script.name, *TWO_NODES],
        {**NODE_ENV, **env},
        script.parent,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1
    assert "expected 1 with --keep-platform-args" in res.stderr


def test_platform_args_are_stripped_but_users_rank_stays(script: Path) -> None:
    """A user's own --rank earlier on the line is not part of the trailing run: it stays."""
    data = plan(script, TWO_NODES, NODE_ENV, user_args=("--rank", "7", "--lr", "0.1"))
    for proc in data["nodes"][0]["processes"]:
        assert proc["argv"][1:] == [str(script), "--rank", "7", "--lr", "0.1"]
        assert proc["env"]["GROUP_RANK"] == "1"


def test_auto_mode_and_named_mode_agree(script: Path) -> None:
    auto = plan(script, TWO_NODES, NODE_ENV)
    named = plan(script, TWO_NODES, NODE_ENV, ("--mode", "pytorch"))
    assert auto == named


def test_run_id_and_log_dir_from_the_platform(script: Path, tmp_path: Path) -> None:
    env = {"MA_VJ_NAME": "ma-job-0a1b", "MA_LOG_DIR": str(tmp_path / "logs")}
    proc = plan(script, ["--init_method", INIT], env)["nodes"][0]["processes"][0]
    assert proc["env"]["TORCHELASTIC_RUN_ID"] == "ma-job-0a1b"
    assert proc["log"] == f"{tmp_path}/logs/marun/rank_0.log"
    assert not (tmp_path / "logs").exists()  # planning writes nothing


@pytest.mark.parametrize(
    ("env", "hosts", "note"),
    [
        (NODE_ENV, ["job-a-worker-0.job-a"], False),  # VC_WORKER_HOSTS
        (  # the platform's name pattern
            {k: v for k, v in NODE_ENV.items() if k != "VC_WORKER_HOSTS"},
            ["job-a-worker-0.job-a"],
            False,
        ),
        ({"MA_NUM_GPUS": "2"}, ["node-0"], True),  # MA_NUM_HOSTS unset: no names
        (  # names that do not fit: placeholders, and a note saying why
            {**NODE_ENV, "VC_WORKER_HOSTS": "a,b,c"},
            ["node-0"],
            True,
        ),
    ],
    ids=["vc-worker-hosts", "pattern", "no-ma-num-hosts", "bad-names"],
)
def test_other_nodes_host_names(
    script: Path, env: dict[str, str], hosts: list[str], note: bool
) -> None:
    data = plan(script, TWO_NODES, env, ("--all-nodes",))
    assert [n["host"] for n in data["nodes"]] == [*hosts, socket.gethostname()]
    assert any("node-<i>" in n for n in data["notes"]) == note


# Bad input: (id, appended words, extra env, marun options, words the message must hold)
BAD = [
    ("scheme", ["--init_method", "udp://1.2.3.4:5"], {}, [], ["--init_method", "udp://1.2.3.4:5"]),
    ("env-scheme", ["--init_method", "env://"], {}, [], ["--init_method", "'env://'"]),
    ("no-port", ["--init_method", "tcp://1.2.3.4"], {}, [], ["--init_method", "tcp://1.2.3.4'"]),
    ("port-text", ["--init_method", "tcp://h:http"], {}, [], ["--init_method", "tcp://h:http"]),
    ("port-zero", ["--init_method", "tcp://h:0"], {}, [], ["--init_method", "1-65535"]),
    ("port-high", ["--init_method", "tcp://h:70000"], {}, [], ["--init_method", "h:70000"]),
    ("no-host", ["--init_method", "tcp://:29500"], {}, [], ["--init_method", "tcp://:29500"]),
    ("path", ["--init_method", "tcp://h:1/x"], {}, [], ["--init_method", "tcp://h:1/x"]),
    ("empty", ["--init_method", ""], {}, [], ["--init_method", "''"]),
    ("rank-alone", ["--init_method", INIT, "--rank", "1"], {}, [], ["--rank", "'1'"]),
    ("world-alone", ["--init_method", INIT, "--world_size", "2"], {}, [], ["--world_size", "'2'"]),
    (
        "rank-too-big",
        ["--init_method", INIT, "--rank", "2", "--world_size", "2"],
        {},
        [],
        ["--rank", "'2'", "--world_size=2"],
    ),
    (
        "rank-negative",
        ["--init_method", INIT, "--rank", "-1", "--world_size", "2"],
        {},
        [],
        ["--rank", "'-1'"],
    ),
    (
        "rank-text",
        ["--init_method", INIT, "--rank", "one", "--world_size", "2"],
        {},
        [],
        ["--rank", "'one'"],
    ),
    (
        "world-zero",
        ["--init_method", INIT, "--rank", "0", "--world_size", "0"],
        {},
        [],
        ["--world_size", "'0'"],
    ),
    (
        "hosts-disagree",
        ["--init_method", INIT, "--rank", "0", "--world_size", "2"],
        {"MA_NUM_HOSTS": "3", "VC_TASK_INDEX": "0"},
        [],
        ["MA_NUM_HOSTS", "'3'", "--world_size", "'2'"],
    ),
    (
        "hosts-but-one-node",
        ["--init_method", INIT],
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0"},
        [],
        ["MA_NUM_HOSTS", "'2'", "no --world_size"],
    ),
    (
        "hosts-not-a-number",
        ["--init_method", INIT],
        {"MA_NUM_HOSTS": "two"},
        [],
        ["MA_NUM_HOSTS", "'two'"],
    ),
    ("no-init-method", [], {}, ["--mode", "pytorch"], ["--init_method", "not appended"]),
    ("gpus-text", ["--init_method", INIT], {"MA_NUM_GPUS": "x"}, [], ["MA_NUM_GPUS", "'x'"]),
    ("nproc-zero", ["--init_method", INIT], {}, ["--nproc-per-node", "0"], ["--nproc-per-node"]),
    ("nic-missing", ["--init_method", INIT], {}, ["--nic", "nosuch0"], ["nic", "'nosuch0'"]),
    # Digits that are not ASCII digits: `'²'.isdigit()` is true and int('²') raises.
    ("port-superscript", ["--init_method", "tcp://h:²"], {}, [], ["--init_method", "h:²"]),
    (
        "rank-superscript",
        ["--init_method", INIT, "--rank", "¹", "--world_size", "2"],
        {},
        [],
        ["--rank", "'¹'"],
    ),
    # The host becomes MASTER_ADDR: a host name or an address, nothing else.
    ("host-two-ports", ["--init_method", "tcp://h:1:2"], {}, [], ["--init_method", "h:1:2"]),
    ("host-semicolon", ["--init_method", "tcp://a;b:1"], {}, [], ["--init_method", "a;b:1"]),
    ("host-option", ["--init_method", "tcp://-oProxyCommand=x:1"], {}, [], ["-oProxyCommand"]),
    ("host-newline", ["--init_method", "tcp://a\nb:1"], {}, [], ["'tcp://a\\nb:1'"]),
    ("host-empty-label", ["--init_method", "tcp://a..b:1"], {}, [], ["a..b"]),
    ("host-long-label", ["--init_method", f"tcp://{'x' * 64}.b:1"], {}, [], ["--init_method"]),
    (
        "world-huge",
        ["--init_method", INIT, "--rank", "0", "--world_size", "9" * 20],
        {},
        [],
        ["--world_size", "from 1 to 100000"],
    ),
    (
        "nproc-huge",
        ["--init_method", INIT],
        {},
        ["--nproc-per-node", "9" * 20],
        ["--nproc-per-node", "from 1 to 1024"],
    ),
    (
        "gpus-huge",
        ["--init_method", INIT],
        {"MA_NUM_GPUS": "100000000"},
        [],
        ["MA_NUM_GPUS", "from 0 to 1024"],
    ),
    (
        "hosts-huge",
        ["--init_method", INIT],
        {"MA_NUM_HOSTS": "100000000"},
        [],
        ["MA_NUM_HOSTS", "from 1 to 100000"],
    ),
    ("hosts-float", ["--init_method", INIT], {"MA_NUM_HOSTS": "1e8"}, [], ["MA_NUM_HOSTS='1e8'"]),
    # A bare --init_method (no value) says so, not "not appended" (part 19, item 5).
    ("init-method-bare", ["--init_method"], {}, ["--mode", "pytorch"], ["appended with no value"]),
    # torchrun's options without the platform (part 19, item 2): checked as the platform's.
    ("no-init-method-hint", [], {}, ["--mode", "pytorch"], ["--standalone"]),
    (
        "standalone-and-appended",
        ["--init_method", INIT],
        {},
        ["--standalone"],
        ["one or the other"],
    ),
    ("standalone-nnodes", [], {}, ["--standalone", "--nnodes", "2"], ["--standalone", "--nnodes"]),
    (
        "nnodes-no-addr",
        [],
        {},
        ["--nnodes", "2", "--node-rank", "1"],
        ["--nnodes", "--master-addr"],
    ),
    (
        "node-rank-too-big",
        [],
        {},
        ["--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1"],
        ["--node-rank", "below --nnodes=2"],
    ),
    ("nnodes-zero", [], {}, ["--nnodes", "0"], ["--nnodes", "from 1"]),
    ("master-addr-bad", [], {}, ["--master-addr", "a;b"], ["--master-addr", "'a;b'"]),
    ("master-port-bad", [], {}, ["--standalone", "--master-port", "0"], ["--master-port"]),
    (
        "standalone-hosts",
        [],
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0"},
        ["--standalone"],
        ["MA_NUM_HOSTS", "--nnodes=1"],
    ),
    ("standalone-mindspore", [], {}, ["--mode", "mindspore", "--standalone"], ["--mode pytorch"]),
]


@pytest.mark.parametrize(
    ("appended", "env", "options", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input(
    tmp_path: Path,
    appended: list[str],
    env: dict[str, str],
    options: list[str],
    words: list[str],
) -> None:
    """`marun run`: exit 2, one line naming the flag and the value, nothing started or written."""
    marker = tmp_path / "started"
    (tmp_path / "train.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    res = run_marun(["run", *options, "--", "train.py", *appended], env=env, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    assert res.stderr.startswith("marun: error: ")
    assert res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr
    for word in words:
        assert word in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_password_in_init_method_stays_out_of_the_error(script: Path) -> None:
    res = run_marun(
        ["plan", "--", script.name, "--init_method", "tcp://user:s3cret@h:1"], cwd=script.parent
    )
    assert res.returncode == 2
    assert "--init_method" in res.stderr and "user:***@h:1" in res.stderr
    assert "s3cret" not in res.stderr


def test_plan_reports_bad_input_as_run_does(script: Path) -> None:
    args = ["--", script.name, "--init_method", "tcp://h:0"]
    planned = run_marun(["plan", *args], cwd=script.parent)
    ran = run_marun(["run", *args], cwd=script.parent)
    assert planned.returncode == ran.returncode == 2
    assert planned.stderr == ran.stderr


def test_rank_must_agree_with_the_platforms_task_index(script: Path) -> None:
    args = ["plan", "--mode", "pytorch", "--", script.name]
    init = ["--init_method", "tcp://10.0.0.1:29500", "--rank", "1", "--world_size", "2"]
    env = {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0"}
    res = run_marun([*args, *init], env=env, cwd=script.parent)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1
    assert "--rank='1' but VC_TASK_INDEX='0'" in res.stderr
    ok = run_marun([*args, *init], env={**env, "VC_TASK_INDEX": "1"}, cwd=script.parent)
    assert ok.returncode == 0, ok.stderr


def test_socket_ifname_is_never_pinned_to_a_guess(script: Path) -> None:
    """Node 1, node 0 elsewhere, no MA_CURRENT_IP, no nic: marun does not know this node's
    interface, so it leaves GLOO/NCCL_SOCKET_IFNAME to the libraries instead of guessing from
    the default route. With `nic` (or MA_CURRENT_IP) it sets them."""
    args = ["plan", "--format", "json", "--mode", "pytorch", "--", script.name]
    init = ["--init_method", "tcp://192.0.2.10:29500", "--rank", "1", "--world_size", "2"]
    env = {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1"}
    res = run_marun([*args, *init], env=env, cwd=script.parent)
    assert res.returncode == 0, res.stderr
    (proc,) = json.loads(res.stdout)["nodes"][0]["processes"]
    assert "GLOO_SOCKET_IFNAME" not in proc["env"] and "NCCL_SOCKET_IFNAME" not in proc["env"]
    res = run_marun([*args, *init], env={**env, "MARUN_NIC": "lo"}, cwd=script.parent)
    (proc,) = json.loads(res.stdout)["nodes"][0]["processes"]
    assert proc["env"]["GLOO_SOCKET_IFNAME"] == proc["env"]["NCCL_SOCKET_IFNAME"] == "lo"


def test_a_rendezvous_address_this_host_lacks_leaves_socket_ifname_unset_with_a_note(
    tmp_path: Path,
) -> None:
    """Node 0 given an --init_method address none of its interfaces holds: no *_SOCKET_IFNAME
    (a guess would pin gloo/NCCL to the wrong NIC), and a note that says why."""
    (tmp_path / "train.py").write_text("")
    res = run_marun(
        ["plan", "--mode", "pytorch", "--format", "json", "--", "train.py",
         "--init_method", "tcp://192.0.2.77:29500"],
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    env = data["nodes"][0]["processes"][0]["env"]
    assert "GLOO_SOCKET_IFNAME" not in env and "NCCL_SOCKET_IFNAME" not in env
    assert any(
        "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set: no interface of this host holds "
        "192.0.2.77" in note
        for note in data["notes"]
    ), data["notes"]


def test_standalone_is_a_local_job_without_the_platform(script: Path) -> None:
    """`--standalone` (torchrun's): N processes on this machine, 127.0.0.1 and a free port, no
    platform variable and no appended argument; auto mode takes it for pytorch."""
    data = plan(script, [], options=("--standalone", "--nproc-per-node", "2"))
    procs = data["nodes"][0]["processes"]
    assert [p["env"]["RANK"] for p in procs] == ["0", "1"]
    env = procs[0]["env"]
    assert (env["MASTER_ADDR"], env["WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == (
        "127.0.0.1",
        "2",
        "1",
    )
    assert 0 < int(env["MASTER_PORT"]) < 65536
    assert "coordination" not in data
    assert any("--standalone" in note for note in data["notes"])
    fixed = plan(script, [], options=("--standalone", "--master-port", "29511"))
    assert fixed["nodes"][0]["processes"][0]["env"]["MASTER_PORT"] == "29511"


def test_nnodes_node_rank_master_addr_as_torchrun(script: Path) -> None:
    """`--nnodes 2 --node-rank 1 --master-addr A --master-port P`: node 1 of 2, as the platform's
    `--init_method tcp://A:P --rank 1 --world_size 2` would make it."""
    options = ("--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1")
    by_options = plan(script, [], {"MA_NUM_GPUS": "2"}, (*options, "--master-port", "29500"))
    by_platform = plan(script, TWO_NODES, {"MA_NUM_GPUS": "2"})
    assert by_options["nodes"] == by_platform["nodes"]
    assert by_options["coordination"]["nodes"] == 2
    # torchrun's default port, 29500, when none is given
    default = plan(script, [], {"MA_NUM_GPUS": "2"}, options)
    assert default["nodes"][0]["processes"][0]["env"]["MASTER_PORT"] == "29500"
    # --node-rank 0 alone is given too (0 is no "not given"): node 0 of 1 on 127.0.0.1
    first = plan(script, [], options=("--mode", "pytorch", "--node-rank", "0"))
    assert first["nodes"][0]["processes"][0]["env"]["MASTER_ADDR"] == "127.0.0.1"


def test_torchruns_error_handling_variables(script: Path) -> None:
    """As torchrun (part 19, item 7): TORCH_NCCL_ASYNC_ERROR_HANDLING=1 unless the user set it,
    and each rank's TORCHELASTIC_ERROR_FILE, where torch's @record writes its exception."""
    procs = plan(script, [], options=("--standalone", "--nproc-per-node", "2"))["nodes"][0]
    envs = [p["env"] for p in procs["processes"]]
    assert [e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] for e in envs] == ["1", "1"]
    assert [e["TORCHELASTIC_ERROR_FILE"] for e in envs] == [
        f"{script.parent}/marun_logs/rank_{r}.error.json" for r in (0, 1)
    ]
    kept = plan(script, [], {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, ("--standalone",))
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in kept["nodes"][0]["processes"][0]["env"]
