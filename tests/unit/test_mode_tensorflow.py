"""`tensorflow` mode: the platform's appended --task_index/--ps_hosts/--worker_hosts/--job_name
(docs/platform-contract.md) turned into TF_CONFIG. Plans only: nothing here needs TensorFlow."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from conftest import run_marun
from marun.errors import InputError
from marun.inputs.tf_hosts import parse_host_list

PS = ("job-ps-0.job:5000", "job-ps-1.job:5001")
WORKERS = ("job-worker-0.job:6000", "job-worker-1.job:6001", "job-worker-2.job:6002")
PS_ARG = "[" + ",".join(PS) + "]"  # the platform's form
WORKERS_ARG = "[" + ",".join(WORKERS) + "]"


def appended(
    job: str, index: int | str, ps: str | None = PS_ARG, workers: str = WORKERS_ARG
) -> list[str]:
    words = ["--task_index", str(index)]
    if ps is not None:
        words += ["--ps_hosts", ps]
    return [*words, "--worker_hosts", workers, "--job_name", job]


def plan(
    script: Path,
    words: list[str],
    env: dict[str, str] | None = None,
    options: tuple[str, ...] = (),
    user_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    res = run_marun(
        ["plan", "--format", "json", *options, "--", script.name, *user_args, *words],
        env=env,
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    assert data["mode"] == "tensorflow"
    return data


def only_process(data: dict[str, Any]) -> dict[str, Any]:
    (node,) = data["nodes"]
    (proc,) = node["processes"]
    assert isinstance(proc, dict)
    return proc


def config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    return json.dumps(
        {"cluster": cluster, "task": {"type": task_type, "index": index}}, separators=(",", ":")
    )


PS_CLUSTER = {"ps": list(PS), "worker": list(WORKERS)}
CHIEF_CLUSTER = {"chief": [WORKERS[0]], "ps": list(PS), "worker": list(WORKERS[1:])}

# (id, appended words, --tf-chief, process name, TF_CONFIG)
VARIANTS = [
    ("ps0", appended("ps", 0), False, "ps0", config(PS_CLUSTER, "ps", 0)),
    ("ps1", appended("ps", 1), False, "ps1", config(PS_CLUSTER, "ps", 1)),
    ("worker2", appended("worker", 2), False, "worker2", config(PS_CLUSTER, "worker", 2)),
    (
        "worker-only",
        appended("worker", 1, ps=None),
        False,
        "worker1",
        config({"worker": list(WORKERS)}, "worker", 1),
    ),
    ("chief-ps", appended("ps", 1), True, "ps1", config(CHIEF_CLUSTER, "ps", 1)),
    ("chief-w0", appended("worker", 0), True, "chief0", config(CHIEF_CLUSTER, "chief", 0)),
    ("chief-w2", appended("worker", 2), True, "worker1", config(CHIEF_CLUSTER, "worker", 1)),
    ("chief-named", appended("chief", 0), True, "chief0", config(CHIEF_CLUSTER, "chief", 0)),
    (
        "chief-one-worker",
        appended("worker", 0, workers=WORKERS[0]),
        True,
        "chief0",
        config({"chief": [WORKERS[0]], "ps": list(PS)}, "chief", 0),
    ),
    (  # never in the cluster: an evaluator there makes PS jobs hang (tensorflow #30121)
        "evaluator",
        appended("evaluator", 0),
        False,
        "evaluator0",
        config(PS_CLUSTER, "evaluator", 0),
    ),
]


@pytest.mark.parametrize(
    ("words", "chief", "name", "tf_config"),
    [v[1:] for v in VARIANTS],
    ids=[v[0] for v in VARIANTS],
)
def test_tf_config(script: Path, words: list[str], chief: bool, name: str, tf_config: str) -> None:
    options = ("--tf-chief",) if chief else ()
    proc = only_process(plan(script, words, options=options))
    assert proc["env"] == {"TF_CONFIG": tf_config}
    task_type = name.rstrip("0123456789")
    assert proc["name"] == name
    assert proc["role"] == task_type
    assert proc["rank"] is None
    # A parameter server never exits by itself; nor does a worker that a chief coordinates.
    assert proc["daemon"] == (task_type == "ps" or (task_type == "worker" and chief))
    assert proc["log"] == f"{script.parent}/marun_logs/{task_type}_{name[len(task_type) :]}.log"
    assert proc["argv"][1:] == [str(script)]
    assert proc["cwd"] == str(script.parent)


def test_all_nodes(script: Path) -> None:
    """One node per container: ps tasks, then workers, each with its own task in TF_CONFIG."""
    data = plan(script, appended("worker", 1), {"MA_TASK_NAME": "worker"}, ("--all-nodes",))
    nodes = data["nodes"]
    assert [n["index"] for n in nodes] == list(range(5))
    assert [n["host"] for n in nodes] == [a.split(":")[0] for a in PS + WORKERS]
    names = [p["name"] for n in nodes for p in n["processes"]]
    assert names == ["ps0", "ps1", "worker0", "worker1", "worker2"]
    for node in nodes:
        (proc,) = node["processes"]
        task_type, index = proc["role"], int(proc["name"][len(proc["role"]) :])
        assert proc["env"] == {"TF_CONFIG": config(PS_CLUSTER, task_type, index)}
        assert proc["daemon"] == (task_type == "ps")
    # This container's plan is the same node as in the whole job's.
    assert only_process(plan(script, appended("worker", 1))) == nodes[3]["processes"][0]
    assert plan(script, appended("worker", 1))["nodes"][0]["index"] == 3


def test_all_nodes_with_chief_and_evaluator(script: Path) -> None:
    data = plan(script, appended("evaluator", 0), options=("--all-nodes", "--tf-chief"))
    names = [n["processes"][0]["name"] for n in data["nodes"]]
    assert names == ["ps0", "ps1", "chief0", "worker0", "worker1", "evaluator0"]
    assert data["nodes"][-1]["host"] == socket.gethostname()


def test_one_node_nothing_appended(script: Path) -> None:
    """One node: one container, nothing appended: one process, no TF_CONFIG."""
    data = plan(script, [], {"MA_NUM_HOSTS": "1"}, ("--mode", "tensorflow"), ("--steps", "3"))
    proc = only_process(data)
    assert proc["env"] == {}
    assert proc["name"] == "worker0"
    assert proc["argv"][1:] == [str(script), "--steps", "3"]


def test_auto_mode(script: Path) -> None:
    words = appended("worker", 0)
    assert plan(script, words) == plan(script, words, options=("--mode", "tensorflow"))
    worker_only = appended("worker", 0, ps=None)
    assert plan(script, worker_only)["mode"] == "tensorflow"


def test_platform_args_stripped_or_kept(script: Path) -> None:
    words = appended("worker", 1)
    user = ("--job_name", "mnist", "--lr", "0.1")  # the user's own --job_name stays
    assert only_process(plan(script, words, user_args=user))["argv"][1:] == [str(script), *user]
    kept = only_process(plan(script, words, options=("--keep-platform-args",), user_args=user))
    assert kept["argv"][1:] == [str(script), *user, *words]


HOST_FORMS = [
    ("bracketed", "[a-ps-0.a:5000,a-ps-1.a:5001]", ("a-ps-0.a:5000", "a-ps-1.a:5001")),
    ("plain", "a-ps-0.a:5000,a-ps-1.a:5001", ("a-ps-0.a:5000", "a-ps-1.a:5001")),
    ("spaces", " [ a:5000 , b:5001 ] ", ("a:5000", "b:5001")),
    ("quoted-list", '"[a:5000,b:5001]"', ("a:5000", "b:5001")),
    ("single-quoted", "'a:5000,b:5001'", ("a:5000", "b:5001")),
    ("json", '["a:5000", "b:5001"]', ("a:5000", "b:5001")),
    ("python-list", "['a:5000', 'b:5001']", ("a:5000", "b:5001")),
    ("one", "[10.0.0.1:9999]", ("10.0.0.1:9999",)),
    ("one-plain", "a:1", ("a:1",)),
    ("ipv6", "[[::1]:5000,[fe80::2]:5001]", ("[::1]:5000", "[fe80::2]:5001")),
    ("ipv6-plain", "[::1]:5000", ("[::1]:5000",)),
    ("max-port", "a:65535", ("a:65535",)),
]


@pytest.mark.parametrize(
    ("raw", "hosts"), [f[1:] for f in HOST_FORMS], ids=[f[0] for f in HOST_FORMS]
)
def test_host_list_forms(raw: str, hosts: tuple[str, ...]) -> None:
    assert parse_host_list("--ps_hosts", raw) == hosts


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "[]",
        '""',
        "[ ]",
        "a",
        "a:",
        ":5000",
        "a:0",
        "a:65536",
        "a:http",
        "a:1,",
        "a b:1",
        "a:-1",
    ],
)
def test_bad_host_lists(raw: str) -> None:
    with pytest.raises(InputError) as err:
        parse_host_list("--ps_hosts", raw)
    assert str(err.value).startswith(f"--ps_hosts={raw!r}: expected ")


def test_bracket_forms_give_one_tf_config(script: Path) -> None:
    configs = {
        only_process(plan(script, appended("worker", 0, ps=ps, workers=w)))["env"]["TF_CONFIG"]
        for ps, w in [
            (PS_ARG, WORKERS_ARG),
            (",".join(PS), ",".join(WORKERS)),
            (json.dumps(list(PS)), json.dumps(list(WORKERS))),
            (f'"{PS_ARG}"', ", ".join(WORKERS)),
        ]
    }
    assert configs == {config(PS_CLUSTER, "worker", 0)}


# Bad input: (id, appended words, extra env, marun options, words the message must hold)
BAD = [
    ("job-name", appended("boss", 0), {}, [], ["--job_name", "'boss'"]),
    (
        "task-name-differs",
        appended("ps", 0),
        {"MA_TASK_NAME": "worker"},
        [],
        ["--job_name='ps'", "MA_TASK_NAME='worker'"],
    ),
    ("index-text", appended("worker", "x"), {}, [], ["--task_index", "'x'"]),
    ("index-negative", appended("worker", -1), {}, [], ["--task_index", "'-1'"]),
    ("worker-index-high", appended("worker", 3), {}, [], ["--task_index", "'3'", "below 3"]),
    ("ps-index-high", appended("ps", 2), {}, [], ["--task_index", "'2'", "below 2"]),
    (
        "chief-index",
        appended("chief", 1),
        {},
        ["--tf-chief"],
        ["--task_index", "'1'", "0 for the chief"],
    ),
    ("chief-without-option", appended("chief", 0), {}, [], ["--job_name", "--tf-chief"]),
    ("ps-without-hosts", appended("ps", 0, ps=None), {}, [], ["--job_name='ps'", "--ps_hosts"]),
    ("ps-empty", appended("worker", 0, ps="[]"), {}, [], ["--ps_hosts", "'[]'", "empty"]),
    ("workers-empty", appended("worker", 0, workers=""), {}, [], ["--worker_hosts", "''"]),
    ("no-port", appended("worker", 0, workers="[a,b]"), {}, [], ["--worker_hosts", "'a'"]),
    ("port-range", appended("ps", 0, ps="[a:70000]"), {}, [], ["--ps_hosts", "a:70000"]),
    (
        "duplicate-address",
        appended("worker", 0, ps=f"[{WORKERS[0]}]"),
        {},
        [],
        ["--worker_hosts", WORKERS[0], "once"],
    ),
    (
        "no-job-name",
        ["--task_index", "0", "--ps_hosts", PS_ARG, "--worker_hosts", WORKERS_ARG],
        {},
        [],
        ["--job_name", "not appended"],
    ),
    (
        "no-task-index",
        ["--ps_hosts", PS_ARG, "--worker_hosts", WORKERS_ARG, "--job_name", "ps"],
        {},
        [],
        ["--task_index", "not appended"],
    ),
    (
        "no-worker-hosts",
        ["--task_index", "0", "--ps_hosts", PS_ARG, "--job_name", "ps"],
        {},
        [],
        ["--worker_hosts", "not appended"],
    ),
    (
        "several-nodes-nothing-appended",
        [],
        {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0"},
        ["--mode", "tensorflow"],
        ["MA_NUM_HOSTS='2'", "--task_index"],
    ),
]


@pytest.mark.parametrize(
    ("words", "env", "options", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input(
    tmp_path: Path,
    words: list[str],
    env: dict[str, str],
    options: list[str],
    expected: list[str],
) -> None:
    """`marun run`: exit 2, one line naming the flag and the value, nothing started or written."""
    marker = tmp_path / "started"
    (tmp_path / "train.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    res = run_marun(["run", *options, "--", "train.py", *words], env=env, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    assert res.stderr.startswith("marun: error: ")
    assert res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr
    for word in expected:
        assert word in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


@pytest.mark.parametrize("var", ["VC_TASK_INDEX", "MA_TASK_INDEX"])
def test_task_index_must_agree_with_the_platforms_index(var: str, script: Path) -> None:
    res = run_marun(
        ["plan", "--mode", "tensorflow", "--", script.name, *appended("worker", 1)],
        env={var: "0"},
        cwd=script.parent,
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1
    assert f"--task_index='1' but {var}='0'" in res.stderr
    ok = run_marun(
        ["plan", "--mode", "tensorflow", "--", script.name, *appended("worker", 1)],
        env={var: "1"},
        cwd=script.parent,
    )
    assert ok.returncode == 0, ok.stderr


# -- TF_PS_HOSTS / TF_WORKER_HOSTS: what the platform makes the appended lists from ------------

PLATFORM_VARS = {"TF_PS_HOSTS": PS_ARG, "TF_WORKER_HOSTS": WORKERS_ARG}


@pytest.mark.parametrize(("job", "index"), [("worker", 2), ("ps", 1)])
def test_the_platform_variables_give_the_cluster_when_nothing_is_appended(
    script: Path, job: str, index: int
) -> None:
    env = {**PLATFORM_VARS, "MA_TASK_NAME": job, "VC_TASK_INDEX": str(index)}
    from_vars = plan(script, [], env)  # --mode auto: the variables mean tensorflow
    from_args = plan(script, appended(job, index))
    assert only_process(from_vars)["env"] == only_process(from_args)["env"]
    assert from_vars["nodes"] == from_args["nodes"]
    whole = plan(script, [], env, ("--all-nodes",))
    assert [n["processes"][0]["name"] for n in whole["nodes"]] == [
        "ps0",
        "ps1",
        "worker0",
        "worker1",
        "worker2",
    ]


def test_the_platform_variables_get_coordination_like_the_appended_flags(script: Path) -> None:
    env = {**PLATFORM_VARS, "MA_TASK_NAME": "worker", "VC_TASK_INDEX": "1"}
    from_vars = plan(script, [], env)["coordination"]
    from_args = plan(script, appended("worker", 1))["coordination"]
    assert from_vars == from_args
    assert (from_vars["host"], from_vars["nodes"], from_vars["leader"]) == (
        "job-worker-0.job",
        5,
        2,
    )


def test_worker_only_cluster_from_the_variable(script: Path) -> None:
    env = {"TF_WORKER_HOSTS": WORKERS_ARG, "MA_TASK_NAME": "worker", "MA_TASK_INDEX": "0"}
    proc = only_process(plan(script, [], env))
    assert proc["env"] == {"TF_CONFIG": config({"worker": list(WORKERS)}, "worker", 0)}


def test_appended_lists_agreeing_with_the_variables_pass(script: Path) -> None:
    # The same lists in another of their forms agree: the entries are compared.
    env = {"TF_PS_HOSTS": ",".join(PS), "TF_WORKER_HOSTS": json.dumps(list(WORKERS))}
    assert plan(script, appended("worker", 0), env) == plan(script, appended("worker", 0))


@pytest.mark.parametrize(
    ("env", "words", "says"),
    [
        (
            {"TF_WORKER_HOSTS": "[job-worker-0.job:6000]"},
            appended("worker", 0),
            "--worker_hosts='[job-worker-0.job:6000,job-worker-1.job:6001,job-worker-2.job:6002]'"
            " but TF_WORKER_HOSTS='[job-worker-0.job:6000]': expected the same list",
        ),
        (
            {"TF_PS_HOSTS": "[job-ps-0.job:5000,job-ps-1.job:5009]"},
            appended("worker", 0),
            "but TF_PS_HOSTS='[job-ps-0.job:5000,job-ps-1.job:5009]': expected the same list "
            "(the platform appends --ps_hosts from TF_PS_HOSTS)",
        ),
        (
            {"TF_WORKER_HOSTS": "[a:1,b]", "MA_TASK_NAME": "worker", "VC_TASK_INDEX": "0"},
            [],
            "TF_WORKER_HOSTS='[a:1,b]'",
        ),
        (
            {"TF_WORKER_HOSTS": WORKERS_ARG, "VC_TASK_INDEX": "0"},
            [],
            "MA_TASK_NAME is not set and no --job_name was appended",
        ),
        (
            {"TF_WORKER_HOSTS": WORKERS_ARG, "MA_TASK_NAME": "worker"},
            [],
            "none of MA_TASK_INDEX, VC_TASK_INDEX, VK_TASK_INDEX is set",
        ),
        (
            {"TF_PS_HOSTS": PS_ARG, "MA_TASK_NAME": "ps", "VC_TASK_INDEX": "0"},
            [],
            "--worker_hosts: not appended and TF_WORKER_HOSTS not set",
        ),
        (
            {**PLATFORM_VARS, "MA_TASK_NAME": "worker", "VC_TASK_INDEX": "3"},
            [],
            "--task_index='3': expected an index below 3, the number of entries in TF_WORKER_HOSTS",
        ),
    ],
)
def test_the_platform_variables_are_checked(
    script: Path, env: dict[str, str], words: list[str], says: str
) -> None:
    res = run_marun(["plan", "--", script.name, *words], env=env, cwd=script.parent)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert says in res.stderr


# -- placement ------------------------------------------------------------------------------


def test_ps_and_workers_not_one_to_one_is_a_note(script: Path) -> None:
    ps, workers = "[job-ps-0.job:5000]", "[job-worker-0.job:6000,job-worker-1.job:6001]"
    for options in ((), ("--all-nodes",)):
        data = plan(script, appended("worker", 1, ps=ps, workers=workers), options=options)
        assert any(
            "1 ps and 2 worker(s): the platform starts one ps and one worker container on each "
            "node (1:1)" in note
            for note in data["notes"]
        ), data["notes"]
    one_to_one = appended("worker", 1, ps=PS_ARG, workers="[w-0.j:6000,w-1.j:6001]")
    assert not any("1:1" in note for note in plan(script, one_to_one)["notes"])
    assert not any("1:1" in n for n in plan(script, appended("worker", 0, ps=None))["notes"])


def test_ps_without_tf_chief_says_what_tf2_needs(script: Path) -> None:
    """Part 19, item 6a: a ps/worker job without --tf-chief blocks forever under TF2's
    ParameterServerStrategy: the plan says so and names the flag; with the flag, or with workers
    only, no such note."""
    words = appended("worker", 1, ps=PS_ARG, workers="[w-0.j:6000,w-1.j:6001]")

    def said(data: dict[str, Any]) -> bool:
        return any("ParameterServerStrategy needs a chief" in n for n in data["notes"])

    data = plan(script, words)
    assert said(data) and any("--tf-chief" in n for n in data["notes"])
    assert not said(plan(script, words, options=("--tf-chief",)))
    assert not said(plan(script, appended("worker", 0, ps=None)))


def test_tf_workers_only_for_multi_worker_mirrored_strategy(script: Path) -> None:
    """Part 19, item 6c: in the platform's ps-shaped job, --tf-workers-only gives the workers a
    workers-only TF_CONFIG and each ps container a process that waits (a daemon, ended with the
    job) instead of the script; with --tf-chief it is bad input."""
    lists = {"ps": PS_ARG, "workers": "[w-0.j:6000,w-1.j:6001]"}
    worker = only_process(
        plan(script, appended("worker", 1, **lists), options=("--tf-workers-only",))
    )
    config = json.loads(worker["env"]["TF_CONFIG"])
    assert config == {
        "cluster": {"worker": ["w-0.j:6000", "w-1.j:6001"]},
        "task": {"type": "worker", "index": 1},
    }
    data = plan(script, appended("ps", 0, **lists), options=("--tf-workers-only",))
    ps = only_process(data)
    assert ps["daemon"] and ps["env"] == {} and str(script) not in ps["argv"]
    assert any("--tf-workers-only" in n for n in data["notes"])
    assert not any("ParameterServerStrategy needs a chief" in n for n in data["notes"])
    res = run_marun(
        ["plan", "--tf-workers-only", "--tf-chief", "--", script.name, *appended("ps", 0, **lists)],
        cwd=script.parent,
    )
    assert res.returncode == 2 and "--tf-workers-only with --tf-chief" in res.stderr
