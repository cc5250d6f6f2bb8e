"""The preflight for real (marun.preflight): the ring probe between hosts made of network
namespaces (tests/netns_cluster.py), one with a blackhole route to another, one with a slow
link; and the per-node checks in a mount namespace that shows 7 of a plan's 8 GPUs and a 16 MB
/dev/shm. Each test takes a few seconds; none asserts on a time.

A delay by `tc netem` needs the kernel's sch_netem, which this machine's kernel (and CI's, the
same kind) lacks ("Specified qdisc kind is unknown"): there is no delay test here, only the rate
limit by `tbf` below; the round-trip rule is covered by tests/unit/test_preflight.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from marun.preflight.decide import REFUSE, START_WARNED, decide
from marun.preflight.result import LinkResult, NodeReport
from netns_cluster import NetnsCluster, available

pytestmark = pytest.mark.e2e

ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}
PORT = 5100
JOB = "ma-job.preflight"

# On each host: the node's probe listener; then, given "src src_host dst dst_host address"
# on stdin, the probe of the next node's, printed as JSON; it ends at end of input.
NODE = r"""
import json, sys
from marun.preflight.ring import ProbeListener, probe_link
with ProbeListener(sys.argv[1], port=int(sys.argv[2])):
    print("ready", flush=True)
    src, src_host, dst, dst_host, address = sys.stdin.readline().split()
    link = probe_link((int(src), src_host), (int(dst), dst_host), address, int(sys.argv[2]),
                      sys.argv[1], connect_timeout=1.0)
    print(json.dumps(link.to_dict()), flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    reason = available()
    if reason is not None:
        pytest.skip(f"network-namespace cluster: {reason}")
    with NetnsCluster(3, workdir=tmp_path) as made:
        yield made


def _ring(cluster: NetnsCluster) -> list[LinkResult]:
    """Every host probes the next one's listener, as the barrier's members would."""
    n = cluster.n_hosts
    procs = [
        cluster.popen(
            i, [sys.executable, "-c", NODE, JOB, str(PORT)], ENV,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        for i in range(n)
    ]  # fmt: skip
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for i, proc in enumerate(procs):
            j = (i + 1) % n
            assert proc.stdin is not None
            proc.stdin.write(f"{i} {cluster.name(i)} {j} {cluster.name(j)} {cluster.address(j)}\n")
            proc.stdin.flush()
        links = []
        for proc in procs:
            assert proc.stdout is not None
            links.append(LinkResult.from_dict(json.loads(proc.stdout.readline())))
    finally:
        for proc in procs:
            proc.communicate(timeout=10)  # stdin closed: each ends
    return links


def _reports(cluster: NetnsCluster) -> dict[int, NodeReport]:
    return {
        i: NodeReport(i, cluster.name(i), cluster.address(i), PORT) for i in range(cluster.n_hosts)
    }


def _tc(cluster: NetnsCluster, i: int, *args: str) -> subprocess.CompletedProcess[str]:
    tc = shutil.which("tc")
    if tc is None:
        pytest.skip("`tc` not found (apt-get install iproute2)")
    argv = ["ip", "netns", "exec", cluster.netns(i), tc, "qdisc", "add", "dev", "eth0", "root"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, check=False)


def test_a_blackhole_between_two_hosts_refuses_naming_both(cluster: NetnsCluster) -> None:
    subprocess.run(
        ["ip", "-n", cluster.netns(1), "route", "add", "blackhole", f"{cluster.address(2)}/32"],
        check=True,
    )
    links = _ring(cluster)
    assert [(x.src, x.dst, x.reachable) for x in links] == [
        (0, 1, True),
        (1, 2, False),
        (2, 0, True),
    ]
    decision = decide("on", _reports(cluster), links, 3)
    assert decision.action == REFUSE
    (line,) = decision.lines()
    assert line.startswith("preflight refused the start: unreachable link: ")
    assert f"node 1 ({cluster.name(1)}) -> node 2 ({cluster.name(2)})" in line
    assert f"cannot connect to {cluster.address(2)}:{PORT}" in line


def test_a_slow_link_is_a_warning_naming_it(cluster: NetnsCluster) -> None:
    """Host 2's sending is limited to 16 Mbit/s (tbf): a warning names the link 2 -> 0."""
    limited = _tc(cluster, 2, "tbf", "rate", "16mbit", "burst", "32kb", "latency", "1s")
    if limited.returncode != 0:
        pytest.skip(f"tc tbf unavailable here: {limited.stderr.strip()}")
    links = _ring(cluster)
    assert all(x.reachable for x in links), links
    decision = decide("on", _reports(cluster), links, 3)
    assert decision.action == START_WARNED, links
    # 2 -> 0 carries host 2's data; 1 -> 2's answers wait in the same queue when the probes
    # overlap (they run at once): a warning there is the truth too, and names node 2 as well.
    two = f"node 2 ({cluster.name(2)})"
    lines = decision.lines()
    assert f"preflight warning: slow link: {two} -> node 0 ({cluster.name(0)})" in "\n".join(lines)
    assert all(line.startswith("preflight warning: slow link: ") and two in line for line in lines)


# In a mount namespace of its own: /dev a tmpfs with 7 stand-in GPUs (and /dev/null), /dev/shm
# a 16 MB tmpfs; then `marun doctor` with a plan of 8 GPUs (MA_NUM_GPUS).
MOUNTS = r"""
set -e
mount -t tmpfs -o mode=755 stand-in-dev /dev
mknod -m 666 /dev/null c 1 3
for n in 0 1 2 3 4 5 6; do : > /dev/nvidia$n; done
mkdir /dev/shm
mount -t tmpfs -o size=16m,mode=1777 stand-in-shm /dev/shm
exec "$@"
"""


def test_seven_of_eight_gpus_fail_and_a_16mb_shm_warns(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare (a mount namespace)")
    env = {**ENV, "HOME": str(tmp_path), "MA_NUM_GPUS": "8", "PYTHONUNBUFFERED": "1"}
    out = subprocess.run(
        [unshare, "--mount", "--", "/bin/sh", "-c", MOUNTS, "sh",
         sys.executable, "-m", "marun", "doctor", "--format", "json"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["devices"]["status"] == "fail"
    assert checks["devices"]["detail"] == (
        "the plan uses 8 GPU(s) on this node, 7 visible (/dev/nvidia<N>: 0, 1, 2, 3, 4, 5, 6)"
    )
    assert checks["shm"]["status"] == "warn"
    assert checks["shm"]["detail"].startswith("/dev/shm is 16 MiB, 8 process(es) want 512 MiB")
