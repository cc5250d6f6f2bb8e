"""The platform reader: node variables validated on use, the script resolved, host names."""

from __future__ import annotations

from pathlib import Path

import pytest

from marun.errors import InputError
from marun.inputs.hosts import node_hosts, resolve_ipv4
from marun.inputs.injected import read_platform, resolve_command
from marun.inputs.settings import Settings


def platform(env: dict[str, str], tmp_path: Path, **settings: object):  # type: ignore[no-untyped-def]
    return read_platform(["train.py"], env=env, cwd=str(tmp_path), settings=Settings(**settings))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("env", "index"),
    [
        ({}, 0),
        ({"MA_NUM_HOSTS": "3", "VC_TASK_INDEX": "2"}, 2),
        ({"MA_NUM_HOSTS": "3", "VK_TASK_INDEX": "1"}, 1),
        ({"MA_NUM_HOSTS": "3", "MA_TASK_INDEX": "0", "VC_TASK_INDEX": "2"}, 0),
    ],
)
def test_node_index(tmp_path: Path, env: dict[str, str], index: int) -> None:
    assert platform(env, tmp_path).node_index() == index


# Volcano's svc plugin sets VC_<TASK>_NUM, the task's pod count: the node count where
# MA_NUM_HOSTS is not set, and where both are, they agree.
@pytest.mark.parametrize(
    ("env", "stated"),
    [
        ({}, None),
        ({"VC_WORKER_NUM": "3"}, ("VC_WORKER_NUM", 3)),
        ({"MA_TASK_NAME": "ps-x", "VC_PS_X_NUM": "2"}, ("VC_PS_X_NUM", 2)),
        ({"MA_NUM_HOSTS": "3", "VC_WORKER_NUM": "3"}, ("MA_NUM_HOSTS", 3)),
        ({"MA_NUM_HOSTS": "2"}, ("MA_NUM_HOSTS", 2)),
        ({"MA_TASK_NAME": "ps", "VC_WORKER_NUM": "3"}, None),  # another task's count
    ],
)
def test_node_count_from_volcano(
    tmp_path: Path, env: dict[str, str], stated: tuple[str, int] | None
) -> None:
    plat = platform(env, tmp_path)
    assert plat.given_num_hosts() == stated
    assert plat.num_hosts() == (stated[1] if stated else 1)


def test_node_count_from_volcano_gives_the_host_list_and_index(tmp_path: Path) -> None:
    env = {
        "VC_WORKER_NUM": "2",
        "VC_WORKER_HOSTS": "j-worker-0.j,j-worker-1.j",
        "VC_TASK_INDEX": "1",
    }
    plat = platform(env, tmp_path)
    assert (node_hosts(plat), plat.node_index()) == (("j-worker-0.j", "j-worker-1.j"), 1)


HOSTNAME_WHY = "the task's pod template sets its own hostname"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"MA_NUM_HOSTS": "3", "VC_WORKER_NUM": "2"},
            "VC_WORKER_NUM='2' but MA_NUM_HOSTS='3': expected the same node count",
        ),
        ({"VC_WORKER_NUM": "0"}, "VC_WORKER_NUM='0': expected an integer from 1 to"),
        # A template with its own hostname: Volcano lists and counts one host for the task.
        ({"MA_NUM_HOSTS": "2", "VC_WORKER_NUM": "1"}, HOSTNAME_WHY),
        ({"VC_WORKER_NUM": "1", "VC_TASK_INDEX": "1"}, "an index below VC_WORKER_NUM=1 (Volcano"),
    ],
)
def test_node_count_from_volcano_errors(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as caught:
        platform(env, tmp_path).node_index()
    assert "\n" not in str(caught.value)


def test_a_template_hostname_is_named_for_a_one_host_list(tmp_path: Path) -> None:
    env = {"MA_NUM_HOSTS": "2", "VC_WORKER_HOSTS": "trainer.j"}
    with pytest.raises(InputError, match=HOSTNAME_WHY) as caught:
        node_hosts(platform(env, tmp_path))
    assert str(caught.value).startswith("VC_WORKER_HOSTS lists 1 host(s) (trainer.j): expected ")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "x"},
            "VC_TASK_INDEX='x': expected an integer from 0 to",
        ),
        ({"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "2"}, "VC_TASK_INDEX='2': expected an index below"),
        ({"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "-1"}, "VC_TASK_INDEX='-1'"),
        ({"MA_NUM_HOSTS": "2"}, "none of MA_TASK_INDEX, VC_TASK_INDEX, VK_TASK_INDEX is set"),
        ({"MA_NUM_HOSTS": "0"}, "MA_NUM_HOSTS='0': expected an integer from 1 to 100000"),
        ({"MA_NUM_HOSTS": "two"}, "MA_NUM_HOSTS='two'"),
    ],
)
def test_node_index_errors(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        platform(env, tmp_path).node_index()


@pytest.mark.parametrize(
    ("env", "settings", "count"),
    [
        ({}, {}, 1),
        ({"MA_NUM_GPUS": "8"}, {}, 8),
        ({"MA_NUM_GPUS": "0"}, {}, 1),
        ({"MA_NUM_GPUS": "8"}, {"nproc_per_node": 2}, 2),
    ],
)
def test_devices_per_node(
    tmp_path: Path, env: dict[str, str], settings: dict[str, int], count: int
) -> None:
    assert platform(env, tmp_path, **settings).devices_per_node() == count


def test_host_names_sources(tmp_path: Path) -> None:
    env = {
        "MA_NUM_HOSTS": "2",
        "VC_TASK_INDEX": "0",
        "MA_VJ_NAME": "ma-job",
        "MA_TASK_NAME": "worker",
    }
    assert node_hosts(platform(env, tmp_path, volcano_dir=str(tmp_path))) == (
        "ma-job-worker-0.ma-job",
        "ma-job-worker-1.ma-job",
    )
    (tmp_path / "worker.host").write_text("vc-a\nvc-b\n")
    assert node_hosts(platform(env, tmp_path, volcano_dir=str(tmp_path))) == ("vc-a", "vc-b")
    # VC_WORKER_HOSTS wins where it disagrees with the pattern (seen: ma-job vs modelarts-job).
    env["VC_WORKER_HOSTS"] = (
        "modelarts-job-worker-0.modelarts-job,modelarts-job-worker-1.modelarts-job"
    )
    assert node_hosts(platform(env, tmp_path, volcano_dir=str(tmp_path)))[1].startswith(
        "modelarts-job"
    )


def test_task_name_with_dash_reads_underscored_sources(tmp_path: Path) -> None:
    env = {"MA_NUM_HOSTS": "1", "MA_TASK_NAME": "my-task", "VC_MY_TASK_HOSTS": "h0"}
    assert node_hosts(platform(env, tmp_path)) == ("h0",)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": " , "}, "VC_WORKER_HOSTS"),
        ({"MA_NUM_HOSTS": "3", "VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": "a,b"}, "lists 2 host"),
        ({"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0"}, "MA_VJ_NAME"),
    ],
)
def test_host_name_errors(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        node_hosts(platform(env, tmp_path, volcano_dir=str(tmp_path)))


def test_resolve(tmp_path: Path) -> None:
    assert resolve_ipv4("10.1.2.3", 0.1) == "10.1.2.3"
    assert resolve_ipv4("localhost", 1.0) == "127.0.0.1"
    with pytest.raises(InputError, match="did not resolve"):
        resolve_ipv4("no-such-host.invalid", 0.3)


def test_resolve_command(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    argv = resolve_command(["train.py", "--lr", "1"], str(tmp_path), "/usr/bin/python3")
    assert argv == ("/usr/bin/python3", str(tmp_path / "train.py"), "--lr", "1")
    assert resolve_command(["true", "x"], str(tmp_path), "py") == ("true", "x")
    for bad in (["missing.py"], ["no-such-command-xyz"], ["./nope.sh"], []):
        with pytest.raises(InputError):
            resolve_command(bad, str(tmp_path), "py")


def test_an_interface_that_vanishes_while_listed_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Interfaces come and go (a container's veth, a netns host torn down): one listed by
    netifaces.interfaces() but gone when its addresses are asked for is skipped, not a crash."""
    import netifaces

    from marun.inputs.nic import ipv4_by_interface

    real = netifaces.interfaces
    monkeypatch.setattr(netifaces, "interfaces", lambda: [*real(), "marun-gone0"])
    table = ipv4_by_interface()
    assert "marun-gone0" not in table and "127.0.0.1" in table["lo"]
