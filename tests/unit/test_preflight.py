"""The preflight's pure parts (marun.preflight): its results' bounded wire form, node 0's
decision per policy, the ring's targets, the clock's offset, job.json's section and its report;
and the per-node checks against stand-ins (a directory of device files, a taken port, a missing
interface) and the ring probe on loopback, which start no process."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from marun.preflight.checks import (
    NodeNeeds,
    check_clock,
    check_devices,
    check_disk,
    check_ifnames,
    check_ports,
    check_shm,
    clock_offset,
    run_node_checks,
)
from marun.preflight.decide import (
    REFUSE,
    START,
    START_WARNED,
    decide,
    preflight_section,
    ring_targets,
    slow_links,
)
from marun.preflight.result import (
    FAIL,
    MAX_CHECKS,
    MAX_MESSAGE,
    MAX_REPORT_BYTES,
    OK,
    WARN,
    CheckResult,
    LinkResult,
    NodeReport,
)
from marun.preflight.ring import ProbeListener, probe_link
from marun.report.preflight import preflight_lines, preflight_of

HOSTS = ("job-w-0", "job-w-1", "job-w-2")
FAR_FUTURE = 1e12  # a deadline never reached


def _link(src: int, dst: int, rtt: float = 1e-4, rate: float = 1e9, error: str | None = None):
    return LinkResult(
        src, dst, HOSTS[src], HOSTS[dst], f"10.0.0.{10 + dst}", 5000,
        connect_s=None if error else 2e-4, rtt_s=None if error else rtt,
        throughput=None if error else rate, bytes=0 if error else 4 << 20, error=error,
    )  # fmt: skip


def _reports(*checks_of: tuple[CheckResult, ...]) -> dict[int, NodeReport]:
    return {
        i: NodeReport(i, HOSTS[i], f"10.0.0.{10 + i}", 5000, checks)
        for i, checks in enumerate(checks_of)
    }


RING = [_link(0, 1), _link(1, 2), _link(2, 0)]
SEVEN_OF_EIGHT = CheckResult("devices", FAIL, "the plan uses 8 GPU(s) on this node, 7 visible")
SMALL_SHM = CheckResult("shm", WARN, "/dev/shm is 16 MiB, 8 process(es) want 512 MiB or more")


# -- the decision ----------------------------------------------------------------------------
def test_a_healthy_job_starts_without_a_word() -> None:
    decision = decide("on", _reports((), (), ()), RING, 3)
    assert decision.action == START and decision.lines() == []


def test_an_unreachable_link_refuses_naming_both_nodes_and_hosts() -> None:
    links = [
        _link(0, 1),
        _link(1, 2, error="cannot connect to 10.0.0.12:5000 (No route)"),
        _link(2, 0),
    ]
    decision = decide("on", _reports((), (), ()), links, 3)
    assert decision.action == REFUSE
    (line,) = decision.lines()
    assert line.startswith("preflight refused the start: unreachable link: ")
    assert "node 1 (job-w-1) -> node 2 (job-w-2)" in line


def test_missing_devices_refuse_and_a_small_shm_warns_by_default() -> None:
    decision = decide("on", _reports((), (SEVEN_OF_EIGHT, SMALL_SHM), ()), RING, 3)
    assert decision.action == REFUSE
    assert decision.lines() == [
        "preflight refused the start: node 1 (job-w-1): devices: the plan uses 8 GPU(s) on this"
        " node, 7 visible (and 1 more in job.json's preflight)"
    ]
    decision = decide("on", _reports((), (SMALL_SHM,), ()), RING, 3)
    assert decision.action == START_WARNED
    assert decision.lines() == [
        "preflight warning: node 1 (job-w-1): shm: /dev/shm is 16 MiB, 8 process(es) want 512"
        " MiB or more"
    ]


@pytest.mark.parametrize(
    ("policy", "devices", "shm"),
    [("warn", START_WARNED, START_WARNED), ("strict", REFUSE, REFUSE), ("off", START, START)],
)
def test_each_policy(policy: str, devices: str, shm: str) -> None:
    assert decide(policy, _reports((SEVEN_OF_EIGHT,), (), ()), RING, 3).action == devices
    assert decide(policy, _reports((SMALL_SHM,), (), ()), RING, 3).action == shm


def test_an_unknown_policy_is_a_bug() -> None:
    with pytest.raises(ValueError, match="preflight policy"):
        decide("sometimes", {}, [], 1)


def test_a_node_without_a_report_is_a_warning() -> None:
    reports = _reports((), ())
    decision = decide("on", reports, RING[:1], 3)
    assert decision.action == START_WARNED
    assert decision.lines() == ["preflight warning: node 2 (?): report: sent no preflight report"]


def test_a_slow_link_is_named_by_its_rate_or_its_round_trip() -> None:
    slow_rate = [_link(0, 1), _link(1, 2, rate=2e6), _link(2, 0)]
    (finding,) = slow_links(slow_rate)
    assert finding.line() == (
        "slow link: node 1 (job-w-1) -> node 2 (job-w-2): 2.0 MB/s, where a quarter of the job's"
        " links reach 1000.0 MB/s"
    )
    slow_rtt = [_link(0, 1), _link(1, 2), _link(2, 0, rtt=0.05)]
    (finding,) = slow_links(slow_rtt)
    assert "node 2 (job-w-2) -> node 0 (job-w-0): round trip 50.0 ms" in finding.line()
    decision = decide("on", _reports((), (), ()), slow_rtt, 3)
    assert decision.action == START_WARNED


def test_a_node_with_a_slow_nic_slows_both_its_links_and_both_are_named() -> None:
    """In a ring of 3 two of the links touch the slow node: the median link is a slow one."""
    links = [_link(0, 1), _link(1, 2, rate=3e6), _link(2, 0, rate=2e6)]
    assert [(f.message.split(":")[0]) for f in slow_links(links)] == [
        "node 1 (job-w-1) -> node 2 (job-w-2)",
        "node 2 (job-w-2) -> node 0 (job-w-0)",
    ]


def test_a_link_a_few_times_slower_by_little_is_not_slow() -> None:
    """A busy machine's stall moves a loopback link by milliseconds: below the margins."""
    links = [_link(0, 1), _link(1, 2, rtt=9e-4, rate=1e8), _link(2, 0)]
    assert slow_links(links) == []


def test_the_ring_skips_nodes_without_a_listener() -> None:
    reports = _reports((), (), ())
    assert {k: v.node for k, v in ring_targets(reports).items()} == {0: 1, 1: 2, 2: 0}
    reports[1] = NodeReport(1, HOSTS[1], "10.0.0.11", 0)
    assert {k: v.node for k, v in ring_targets(reports).items()} == {0: 2, 2: 0}
    assert ring_targets({0: reports[0]}) == {}


# -- the wire form ---------------------------------------------------------------------------
def test_a_report_goes_through_json_unchanged() -> None:
    report = NodeReport(
        1, "h", "10.0.0.11", 5000, (SEVEN_OF_EIGHT, CheckResult("x", OK, "y", {"n": 3}))
    )
    assert NodeReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    link = _link(1, 2)
    assert LinkResult.from_dict(json.loads(json.dumps(link.to_dict()))).rtt_s == pytest.approx(1e-4)


def test_what_a_member_sends_is_bounded_and_checked() -> None:
    big = {
        "node": 1, "host": "h" * 10_000, "address": "a", "probe_port": 5000,
        "checks": [
            {"name": "n" * 500, "status": "warn", "message": "m\n" * 10_000,
             "figures": {f"f{i}" * 50: "v" * 10_000 for i in range(100)}}
        ] * 1000,
    }  # fmt: skip
    report = NodeReport.from_dict(big)
    assert len(report.checks) == MAX_CHECKS
    assert len(report.checks[0].message) == MAX_MESSAGE and "\n" not in report.checks[0].message
    assert len(json.dumps(report.to_dict())) < MAX_REPORT_BYTES
    for bad in (
        {"node": -1},
        {"node": True},
        {"node": 1, "checks": "no"},
        {"node": 1, "checks": [{"name": "x", "status": "great", "message": "m"}]},
        {"node": 1, "checks": [{"name": "x", "status": "ok", "message": 3}]},
        {
            "node": 1,
            "checks": [
                {"name": "x", "status": "ok", "message": "m", "figures": {"a": float("nan")}}
            ],
        },
    ):
        with pytest.raises(ValueError):
            NodeReport.from_dict(bad)
    with pytest.raises(ValueError):
        LinkResult.from_dict({"src": 0, "dst": 1, "port": "5000"})


# -- job.json and the report -----------------------------------------------------------------
def test_the_section_and_its_report() -> None:
    links = [
        _link(0, 1),
        _link(1, 2, error="cannot connect to 10.0.0.12:5000 (No route)"),
        _link(2, 0),
    ]
    reports = _reports((), (SMALL_SHM,), ())
    decision = decide("on", reports, links, 3)
    section = json.loads(json.dumps(preflight_section(decision, reports, links, 0.4321)))
    assert section["decision"] == REFUSE and section["seconds"] == 0.432
    assert [n["status"] for n in section["nodes"]] == [OK, WARN, OK]
    assert [(x["src"], x["dst"], x["error"] is None) for x in section["links"]] == [
        (0, 1, True), (1, 2, False), (2, 0, True)
    ]  # fmt: skip
    lines = preflight_lines(preflight_of({"preflight": section}))
    assert lines[0] == "preflight (on): refuse in 0.43s, 3 node(s), 3 link(s), 2 finding(s)"
    assert lines[1].startswith("  refuses: unreachable link: node 1 (job-w-1) -> node 2")
    assert lines[2] == f"  warning: node 1 (job-w-1): shm: {SMALL_SHM.message}"
    assert "link node 1 (job-w-1) -> node 2 (job-w-2): unreachable" in lines[4]
    assert preflight_of({}) is None and preflight_of({"preflight": "x"}) is None
    assert preflight_lines(preflight_of({"preflight": {"nodes": 3}}))[0].startswith("preflight")


# -- the clock -------------------------------------------------------------------------------
def test_the_clock_offset_from_one_exchange() -> None:
    # sent at 100.0, answered at 100.2 (ours); node 0 stamped 105.1: 5 s ahead, +-0.1
    offset, uncertainty = clock_offset(100.0, 105.1, 100.2)
    assert offset == pytest.approx(5.0) and uncertainty == pytest.approx(0.1)
    assert check_clock(offset, uncertainty).status == WARN
    assert "behind node 0's" in check_clock(offset, uncertainty).message
    assert check_clock(*clock_offset(100.0, 100.5, 100.2)).status == OK
    # within the measure's uncertainty: not a finding
    assert check_clock(*clock_offset(100.0, 103.0, 104.0)).status == OK


# -- the per-node checks, against stand-ins --------------------------------------------------
def test_seven_device_files_for_a_plan_of_eight_fail(tmp_path: Path) -> None:
    for n in range(7):
        (tmp_path / f"nvidia{n}").touch()
    (tmp_path / "nvidiactl").touch()
    empty = tmp_path / "bin"
    empty.mkdir()
    needs = NodeNeeds(device_kind="gpu", devices=8, dev_root=str(tmp_path), env_path=str(empty))
    result = check_devices(needs, FAR_FUTURE)
    assert result.status == FAIL and result.figures == {"wanted": 8, "visible": 7, "kind": "gpu"}
    assert result.message.startswith("the plan uses 8 GPU(s) on this node, 7 visible")
    (tmp_path / "nvidia7").touch()
    assert check_devices(needs, FAR_FUTURE).status == OK
    # none at all: a CPU node (MA_NUM_GPUS as the processes per node) or no driver: a warning
    npu = NodeNeeds(device_kind="npu", devices=1, dev_root=str(tmp_path), env_path=str(empty))
    none = check_devices(npu, FAR_FUTURE)
    assert none.status == WARN
    assert none.message.startswith("the plan uses 1 NPU(s) on this node, none visible")


def test_shm_disk_ports_and_interfaces(tmp_path: Path) -> None:
    huge = NodeNeeds(processes=1 << 20, shm_path=str(tmp_path))
    assert check_shm(huge).status == WARN
    assert check_shm(NodeNeeds(shm_path=str(tmp_path / "none"))).status == WARN
    (disk,) = check_disk(NodeNeeds(dirs=(("logs", str(tmp_path / "not" / "yet")),)))
    assert disk.name == "disk logs" and disk.status in (OK, WARN)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (result,) = check_ports(NodeNeeds(ports=(("MASTER_PORT", port),)))
        assert result.status == FAIL and f"MASTER_PORT={port} taken" in result.message
    ifnames = (("GLOO_SOCKET_IFNAME", "lo,nosuch0"), ("NCCL_SOCKET_IFNAME", "l,nosuch0"))
    gloo, nccl = check_ifnames(NodeNeeds(ifnames=ifnames))
    assert gloo.status == FAIL and "no interface nosuch0 here" in gloo.message
    assert nccl.status == OK and "lo" in nccl.message  # a prefix, as NCCL reads it
    assert check_ifnames(NodeNeeds(ifnames=(("NCCL_SOCKET_IFNAME", "^docker"),))) == []


def test_all_checks_of_a_node() -> None:
    results = run_node_checks(NodeNeeds(address="127.0.0.1", host="localhost"))
    by_name = {r.name: r for r in results}
    assert by_name["devices"].status == "skip"
    assert by_name["address"].status == OK and by_name["resolve"].status == OK


# -- the ring probe, on loopback -------------------------------------------------------------
def test_the_probe_measures_a_link_and_names_an_unreachable_one() -> None:
    with ProbeListener("job-a", host="127.0.0.1") as listener:
        link = probe_link((0, "h0"), (1, "h1"), "127.0.0.1", listener.port, "job-a")
        assert link.reachable, link.error
        assert link.connect_s is not None and link.rtt_s is not None and link.throughput
        assert link.bytes == 4 << 20 or 0 < link.bytes < 4 << 20  # within its time budget
        other = probe_link((0, "h0"), (1, "h1"), "127.0.0.1", listener.port, "job-b")
        assert not other.reachable and "connected but" in str(other.error)
        assert listener.served == 1
        port = listener.port
    gone = probe_link((0, "h0"), (1, "h1"), "127.0.0.1", port, "job-a")
    assert gone.error == f"cannot connect to 127.0.0.1:{port} (Connection refused)"


# -- the setting -----------------------------------------------------------------------------
def test_the_preflight_setting_takes_its_words_only(tmp_path: Path) -> None:
    from marun.errors import InputError
    from marun.inputs.settings import load_settings

    assert load_settings({}, {}, str(tmp_path)).settings.preflight == "on"
    env = {"MARUN_PREFLIGHT": "Strict"}
    assert load_settings({}, env, str(tmp_path)).settings.preflight == "strict"
    assert load_settings({"preflight": "off"}, env, str(tmp_path)).settings.preflight == "off"
    with pytest.raises(InputError, match=r"--preflight='sometimes': expected one of on, off"):
        load_settings({"preflight": "sometimes"}, {}, str(tmp_path))
