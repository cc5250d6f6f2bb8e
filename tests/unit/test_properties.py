"""Property-based tests (hypothesis) of every reader and planner: whatever the platform hands
over, marun either builds a value or refuses with an `InputError` (one line, exit 2). Nothing
else may escape: no ValueError, UnicodeError, RecursionError, MemoryError, KeyError.

The examples are generated around the shapes the platform really uses (flags, host:port lists,
rank tables of both formats) and then bent, so that they reach past the first check.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marun.errors import InputError

FAST = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text that looks like what the platform sends, and text that does not.
odd_text = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=string.digits + "-+.e ", max_size=12),
    st.sampled_from(
        ["", "0", "1", "2", "-1", "nan", "inf", "1e9", "²", "0x1f", "99999999999999999999"]
    ),
    st.integers(-(10**30), 10**30).map(str),
)
host = st.one_of(
    st.sampled_from(
        ["127.0.0.1", "localhost", "::1", "[::1]", "a;b", "-oX=y", "h:1", "", "999.1.1.1"]
    ),
    st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z0-9]{1,5}){0,2}", fullmatch=True),
    st.text(max_size=10),
)
port = st.one_of(st.integers(-5, 70000).map(str), odd_text)
address = st.builds(lambda h, p: f"{h}:{p}", host, port)
host_list = st.one_of(
    st.lists(address, max_size=4).map(",".join),
    st.lists(address, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
    st.lists(address, max_size=4).map(json.dumps),
    odd_text,
)
FLAGS = [
    "--init_method",
    "--rank",
    "--world_size",
    "--task_index",
    "--ps_hosts",
    "--worker_hosts",
    "--job_name",
]
flag_value = st.one_of(st.builds(lambda h, p: f"tcp://{h}:{p}", host, port), host_list, odd_text)
appended = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(FLAGS), flag_value).map(list),
        st.tuples(st.sampled_from(FLAGS), flag_value).map(lambda fv: [f"{fv[0]}={fv[1]}"]),
        st.text(max_size=8).map(lambda w: [w]),
    ),
    max_size=6,
).map(lambda groups: [w for g in groups for w in g])


@FAST
@given(user=st.lists(st.text(max_size=10), max_size=4), tail=appended)
def test_split_appended_never_loses_or_invents_a_word(user: list[str], tail: list[str]) -> None:
    from marun.inputs.appended_args import split_appended

    words = ["train.py", *user, *tail]
    mine, found = split_appended(words)
    assert [*mine, *found.words] == words


@FAST
@given(flag=st.sampled_from(["--ps_hosts", "--worker_hosts"]), raw=host_list)
def test_tf_host_lists_parse_or_refuse(flag: str, raw: str) -> None:
    from marun.inputs.tf_hosts import parse_host_list

    try:
        hosts = parse_host_list(flag, raw)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    assert all(isinstance(h, str) and h for h in hosts)


SETTING_NAMES = [
    "NPROC_PER_NODE",
    "GRACE_PERIOD",
    "MAX_RESTARTS",
    "RECOVERY_WAIT",
    "RESOLVE_TIMEOUT",
    "RANKTABLE_TIMEOUT",
    "SSHD_PORT",
    "MS_SCHED_PORT",
    "MS_TOPO_TIMEOUT",
    "NIC",
    "LOG_DIR",
    "CONSOLE_RANKS",
    "MPIRUN_EXTRA_ARGS",
    "PER_NODE",
    "TF_CHIEF",
    "PEER_TIMEOUT",
]


@FAST
@given(values=st.dictionaries(st.sampled_from(SETTING_NAMES), odd_text, max_size=4))
def test_settings_from_the_environment_load_or_refuse(values: Mapping[str, str]) -> None:
    from marun.inputs.settings import load_settings

    env = {f"MARUN_{k}": v for k, v in values.items()}
    try:
        load_settings({}, env, "/nonexistent-cwd")
    except InputError as exc:
        assert "\n" not in str(exc)


yaml_scalar = st.one_of(
    odd_text,
    st.sampled_from(["[]", "{}", "null", ".nan", ".inf", "-.inf", "1e999", "!!binary aGk=", "'²'"]),
)
yaml_doc = st.one_of(
    st.dictionaries(
        st.sampled_from([n.lower() for n in SETTING_NAMES] + ["nope"]), yaml_scalar, max_size=4
    ).map(lambda d: "".join(f"{k}: {v}\n" for k, v in d.items())),
    st.text(max_size=60),
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
)


@FAST
@given(doc=yaml_doc)
def test_settings_files_load_or_refuse(doc: str, tmp_path: Path) -> None:
    from marun.inputs.settings import load_settings

    path = tmp_path / "marun.yaml"
    path.write_bytes(doc.encode("utf-8", "surrogateescape"))
    try:
        load_settings({}, {}, str(tmp_path), str(path))
    except InputError as exc:
        assert "\n" not in str(exc)


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 20), odd_text, st.just([]))


def _bend(doc: Any, draw: Any) -> Any:
    """Replace a few leaves of a sane table with odd values."""
    if isinstance(doc, dict):
        return {
            k: (_bend(v, draw) if draw(st.integers(0, 9)) else draw(json_leaf))
            for k, v in doc.items()
            if draw(st.integers(0, 19))
        }
    if isinstance(doc, list):
        return [_bend(v, draw) for v in doc]
    return doc if draw(st.integers(0, 5)) else draw(json_leaf)


def _server_list(n: int) -> dict[str, Any]:
    return {
        "version": "1.0",
        "status": "completed",
        "server_count": str(n),
        "server_list": [
            {
                "server_id": f"127.0.0.{i + 1}",
                "host_nic_ip": f"127.0.0.{i + 1}",
                "device": [
                    {"device_id": str(d), "device_ip": f"29.0.{i}.{d}", "rank_id": str(2 * i + d)}
                    for d in range(2)
                ],
            }
            for i in range(n)
        ],
    }


def _group_list(n: int) -> dict[str, Any]:
    return {
        "status": "completed",
        "group_count": "1",
        "group_list": [
            {
                "group_name": "worker",
                "device_count": str(2 * n),
                "instance_count": str(n),
                "instance_list": [
                    {
                        "pod_name": f"job-worker-{i}",
                        "server_id": f"127.0.0.{i + 1}",
                        "devices": [
                            {"device_id": str(d), "device_ip": f"29.0.{i}.{d}"} for d in range(2)
                        ],
                    }
                    for i in range(n)
                ],
            }
        ],
    }


@st.composite
def rank_tables(draw: Any) -> str:
    base = draw(st.sampled_from([_server_list, _group_list]))(draw(st.integers(1, 3)))
    return json.dumps(_bend(base, draw))


@FAST
@given(text=rank_tables())
def test_rank_tables_parse_or_refuse(text: str) -> None:
    from marun.inputs.ranktable import parse_rank_table

    try:
        table = parse_rank_table(text, "rt.json")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    assert table.servers


PLATFORM_VARS = [
    "MA_NUM_HOSTS",
    "VC_TASK_INDEX",
    "MA_NUM_GPUS",
    "RANK_ID",
    "RANK_SIZE",
    "ASCEND_DEVICE_ID",
    "MS_SCHED_PORT",
    "MS_TOPO_TIMEOUT",
    "MA_CURRENT_IP",
    "MA_VJ_NAME",
    "MS_ENABLE_RECOVERY",
    "MS_RETRY_INTERVAL_LOWER",
    "VC_WORKER_HOSTS",
]
platform_env = st.dictionaries(
    st.sampled_from(PLATFORM_VARS),
    st.one_of(odd_text, host, st.integers(0, 4).map(str)),
    max_size=5,
)


@FAST
@pytest.mark.parametrize("mode", ["ascend", "mindspore", "pytorch", "tensorflow", "mpi", "auto"])
@given(env=platform_env, tail=appended, table=rank_tables(), all_nodes=st.booleans())
def test_every_planner_plans_or_refuses(
    mode: str, env: dict[str, str], tail: list[str], table: str, all_nodes: bool, tmp_path: Path
) -> None:
    from marun.inputs.injected import read_platform
    from marun.inputs.settings import Settings
    from marun.launch import build_plan
    from marun.plan.launch_plan import LaunchPlan

    (tmp_path / "train.py").write_text("")
    (tmp_path / "rt.json").write_text(table)
    if mode == "ascend":
        env = {"RANK_TABLE_FILE": "rt.json", **env}
    quick = Settings(resolve_timeout=0.0, ranktable_timeout=0.0, nic="lo")
    try:
        platform = read_platform(["train.py", *tail], env, str(tmp_path), quick)
        plan = build_plan(mode, platform, all_nodes)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(plan, LaunchPlan) and plan.nodes
