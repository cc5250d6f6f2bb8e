"""Hot spares in mpi mode: a round's start names the places spares hold (`Start.hosts`), node
0's mpi-leader gets them in MARUN_PLACE_HOSTS, and rewrites those lines of its hostfile
(marun.plan.place_hosts, marun.mpi.leader)."""

from __future__ import annotations

from pathlib import Path

import pytest

from marun.errors import InputError
from marun.job.messages import Start, leader_message
from marun.mpi import leader
from marun.plan.launch_plan import ProcessSpec
from marun.plan.place_hosts import PLACE_HOSTS_VAR, parse_place_hosts, with_place_hosts


def _spec(role: str) -> ProcessSpec:
    return ProcessSpec(name=role, argv=("x",), env={"A": "1"}, cwd="/", log="/l", role=role)


def test_only_the_leader_is_told_the_places_spares_hold() -> None:
    hosts = ((1, "host-d"), (2, "10.0.0.7"))
    told = with_place_hosts(_spec("leader"), hosts)
    assert told.env == {"A": "1", PLACE_HOSTS_VAR: "1=host-d,2=10.0.0.7"}
    assert with_place_hosts(_spec("sshd"), hosts) == _spec("sshd")
    assert with_place_hosts(_spec("leader"), ()) == _spec("leader")


def test_the_start_carries_them_over_the_wire_and_drops_what_is_not_a_host() -> None:
    start = Start(1, {}, (), ((1, "host-d"),))
    body = {"type": "start", **start.to_wire()}
    assert leader_message(body) == start
    bad = {"type": "start", "round": 1, "hosts": {"1": "a b", "x": "h", "2": "ok-host"}}
    assert leader_message(bad) == Start(1, {}, (), ((2, "ok-host"),))
    assert "hosts" not in Start(1, {}).to_wire()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0=h", "'0=h' is not PLACE=HOST with a place from 1 to 2"),
        ("3=h", "'3=h' is not PLACE=HOST"),
        ("1", "'1' is not PLACE=HOST"),
        ("1=a;b", "'a;b' is not a host name or an IP address"),
    ],
)
def test_a_bad_value_is_one_line(text: str, words: str) -> None:
    with pytest.raises(InputError, match=words.replace("(", r"\(")):
        parse_place_hosts(text, 3)


def test_the_leader_rewrites_the_lines_of_the_places_spares_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("10.0.0.1 slots=2\n10.0.0.2 slots=2\n10.0.0.3 slots=2\n")
    entries = leader.read_hostfile(str(hostfile))
    monkeypatch.delenv(PLACE_HOSTS_VAR, raising=False)
    assert leader._placed(entries) == entries
    monkeypatch.setenv(PLACE_HOSTS_VAR, "2=host-e")
    assert leader._placed(entries) == [
        ("10.0.0.1", "slots=2"), ("10.0.0.2", "slots=2"), ("host-e", "slots=2")
    ]  # fmt: skip
    assert "marun: hostfile: place 2 is on host-e now (a spare took it)" in capsys.readouterr().err


def test_a_tf_worker_is_told_the_spare_s_host_on_the_place_s_port() -> None:
    config = (
        '{"cluster":{"worker":["10.0.0.1:5000","10.0.0.2:5001","10.0.0.3:5002"]},'
        '"task":{"type":"worker","index":0}}'
    )
    spec = ProcessSpec(
        name="worker0", argv=("x",), env={"TF_CONFIG": config}, cwd="/", log="/l", role="worker"
    )
    told = with_place_hosts(spec, ((1, "10.0.0.9"), (7, "h")))  # (a place past the list: kept)
    assert told.env["TF_CONFIG"] == config.replace("10.0.0.2:5001", "10.0.0.9:5001")
    assert PLACE_HOSTS_VAR not in told.env
