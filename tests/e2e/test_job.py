"""One job, not N nodes, end to end: network-namespace hosts (netns_cluster.py) with their own
names and addresses, each running `marun run` as its PID 1 in PyTorch mode with the environment
and appended arguments the platform gives (MA_VJ_NAME, VC_TASK_INDEX, MA_NUM_HOSTS, MA_NUM_GPUS;
`--init_method tcp://<node 0>:PORT --rank i --world_size N`). The ranks are plain Python that
block on sockets to their peers, as NCCL/gloo ranks do in a collective: without marun's
coordination a failure or a lost node would leave the others blocked for ever.

No GPU exists here: MA_NUM_GPUS=2 only sets the ranks per host.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from local_cluster import framework_python

from conftest import REPO, shown_while_running
from netns_cluster import NetnsCluster, available

pytestmark = pytest.mark.e2e

JOB = "ma-job-c00rd"
GPUS = 2
TOKEN = "job-token-5ecret"
MASTER_PORT = 29511
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEADLINE = 120.0  # a hang guard only

# Rank 0 listens; every other rank connects, waits for "go", then blocks reading from rank 0,
# which never writes again; rank 0 blocks reading from rank 1. FAIL_RANK (if any) exits FAIL_CODE
# once everybody is connected; DONE_AFTER (if any) makes every rank exit 0 after that long.
RANKS = """\
import os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
fail = int(os.environ.get("FAIL_RANK", "-1"))
done_after = float(os.environ.get("DONE_AFTER", "0"))
done_after += rank * float(os.environ.get("DONE_STAGGER", "0"))
if rank == 0:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("", port))
    srv.listen(64)
    peers = [srv.accept()[0] for _ in range(world - 1)]
    for p in peers:
        p.sendall(b"go")
    print("rank 0: every rank connected", flush=True)
    peer = peers[0]
else:
    while True:
        try:
            peer = socket.create_connection((addr, port), timeout=60)
            break
        except OSError:
            time.sleep(0.2)
    peer.settimeout(None)
    assert peer.recv(2) == b"go"
    print(f"rank {rank}: connected", flush=True)
if rank == fail:
    print(f"rank {rank}: giving up with {os.environ['FAIL_CODE']}", flush=True)
    sys.exit(int(os.environ["FAIL_CODE"]))
if done_after:
    time.sleep(done_after)
    print(f"rank {rank}: done", flush=True)
    sys.exit(0)
peer.recv(1)  # blocks for ever, as a rank in a collective whose peer is gone
"""


@dataclass
class Node:
    index: int
    proc: subprocess.Popen[bytes]
    out: Path
    ended: float | None = None

    @property
    def output(self) -> str:
        return self.out.read_text(errors="replace")


class Job:
    def __init__(
        self, cluster: NetnsCluster, nodes: int, env: Mapping[str, str], python: str
    ) -> None:
        self.python = python
        self.cluster = cluster
        self.n = nodes
        self.extra = dict(env)
        self.nodes: dict[int, Node] = {}
        self.options: list[str] = []

    def env(self, i: int) -> dict[str, str]:
        host = self.cluster.host_dir(i)
        return {
            "PATH": f"{Path(self.python).parent}:{SYSTEM_PATH}",
            "HOME": str(host),
            "LC_ALL": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(REPO / "src"),
            "MA_VJ_NAME": JOB,
            "MA_TASK_NAME": "worker",
            "VC_TASK_INDEX": str(i),
            "MA_NUM_HOSTS": str(self.n),
            "MA_NUM_GPUS": str(GPUS),
            "MARUN_RUN_DIR": str(host / "run"),
            "TMPDIR": str(host / "tmp"),
            "MARUN_GRACE_PERIOD": "5",
            "MARUN_JOB_TOKEN": TOKEN,
            **self.extra,
        }

    def start(self, hosts: Sequence[int], script: str = RANKS) -> None:
        for i in hosts:
            work = self.cluster.host_dir(i) / "job"
            work.mkdir(parents=True)
            (self.cluster.host_dir(i) / "tmp").mkdir(exist_ok=True)
            (work / "ranks.py").write_text(script)
            argv = [self.python, "-m", "marun", "run", *self.options, "--", "ranks.py"]
            argv += ["--init_method", f"tcp://{self.cluster.fqdn(0)}:{MASTER_PORT}"]
            argv += ["--rank", str(i), "--world_size", str(self.n)]
            out = self.cluster.host_dir(i) / "console.txt"
            with out.open("wb") as sink:
                proc = self.cluster.popen(
                    i,
                    argv,
                    self.env(i),
                    pid1=True,
                    cwd=work,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            self.nodes[i] = Node(i, proc, out)

    def finish(self) -> dict[int, int]:
        deadline = time.monotonic() + DEADLINE
        left = set(self.nodes)
        while left:
            for i in sorted(left):
                if self.nodes[i].proc.poll() is not None:
                    self.nodes[i].ended = time.monotonic()
                    left.discard(i)
            if time.monotonic() > deadline:
                pytest.fail(f"nodes {sorted(left)} still run after {DEADLINE}s\n{self.report()}")
            time.sleep(0.05)
        return {i: n.proc.returncode for i, n in self.nodes.items()}

    def wait_for(self, i: int, pattern: str) -> float:
        node = self.nodes[i]
        if not shown_while_running(
            lambda: bool(re.search(pattern, node.output)), node.proc, DEADLINE
        ):
            pytest.fail(f"node {i} never showed {pattern!r}\n{self.report()}")
        return time.monotonic()

    def report(self) -> str:
        return "\n".join(
            f"--- node {i}: exit {n.proc.poll()}\n{n.output[-5000:]}"
            for i, n in sorted(self.nodes.items())
        )

    def job_json(self) -> dict[str, object]:
        path = self.cluster.host_dir(0) / "job" / "marun_logs" / "job.json"
        data: dict[str, object] = json.loads(path.read_text())
        return data


@pytest.fixture
def make_job() -> Iterator[object]:
    reason = available()
    if reason is not None:
        pytest.skip(f"network-namespace cluster: {reason}")
    workdir = Path(tempfile.mkdtemp(prefix="marun-job-e2e-"))
    clusters: list[NetnsCluster] = []

    def make(hosts: int, nodes: int, env: Mapping[str, str], python: str = sys.executable) -> Job:
        cluster = NetnsCluster(hosts, job=JOB, task="worker", workdir=workdir).start()
        clusters.append(cluster)
        return Job(cluster, nodes, env, python)

    yield make
    for cluster in clusters:
        cluster.teardown()
    shutil.rmtree(workdir, ignore_errors=True)


def test_a_node_that_never_starts_is_named(make_job) -> None:  # type: ignore[no-untyped-def]
    job = make_job(3, 3, {"MARUN_ARRIVAL_TIMEOUT": "6"})
    started = time.monotonic()
    job.start([0, 1])  # node 2's container never starts
    codes = job.finish()
    assert codes == {0: 1, 1: 1}, job.report()
    for i in (0, 1):
        out = job.nodes[i].output
        assert f"node 2 ({JOB}-worker-2.{JOB})" in out, job.report()
        assert "never reported" in out, job.report()
        # Nothing started: the ranks would have blocked in the rendezvous.
        assert "process_started" not in out, job.report()
    elapsed = max(n.ended or 0 for n in job.nodes.values()) - started
    print(f"arrival: both nodes ended {elapsed:.1f}s after the start (arrival timeout 6s)")
    assert "2/3 nodes up" in job.nodes[0].output
    report = job.job_json()
    assert [n["slots"][0]["outcome"] for n in report["nodes"]][2] == "missing"  # type: ignore[index]


def test_a_failing_rank_stops_every_node(make_job) -> None:  # type: ignore[no-untyped-def]
    job = make_job(3, 3, {"FAIL_RANK": "4", "FAIL_CODE": "3", "MARUN_PEER_TIMEOUT": "30"})
    job.start([0, 1, 2])
    failed_at = job.wait_for(2, r"rank 4: giving up")
    codes = job.finish()
    assert codes == {0: 3, 1: 3, 2: 3}, job.report()
    for node in job.nodes.values():
        assert re.search(
            r"first failure: node 2 \(\S+\), process rank4 \(rank 4\), exit code 3", node.output
        ), job.report()
        assert "rank 4: giving up with 3" in node.output.split("Job's first failure")[-1]
    took = {i: round((n.ended or 0) - failed_at, 2) for i, n in job.nodes.items()}
    print(f"fail-fast: nodes ended this long after rank 4's last line: {took}")
    # Well before the peer time-out: the stop came from node 0, not from a silence.
    assert max(took.values()) < 30, took
    report = job.job_json()
    assert report["exit_code"] == 3
    first = report["first_failure"]
    assert (first["node"], first["rank"], first["exit_code"]) == (2, 4, 3)  # type: ignore[index]


def test_a_lost_node_stops_the_others(make_job) -> None:  # type: ignore[no-untyped-def]
    job = make_job(3, 3, {"MARUN_PEER_TIMEOUT": "5"})
    job.start([0, 1, 2])
    for i in range(3):
        job.wait_for(i, rf"rank {2 * i + 1}: connected")
    lost_at = time.monotonic()
    job.cluster.drop_host(1)  # node 1's marun and ranks SIGKILLed, its link cut
    codes = job.finish()
    assert codes[0] == 1 and codes[2] == 1, job.report()
    for i in (0, 2):
        assert re.search(
            # silent (the link cut first) or closed (the marun killed first): lost either way
            r"node 1 \(\S+\) lost: (no word from its marun for 5s|its marun's connection "
            r"closed without a goodbye)",
            job.nodes[i].output,
        ), job.report()
    took = {i: round((job.nodes[i].ended or 0) - lost_at, 2) for i in (0, 2)}
    print(f"lost node: the others ended this long after node 1 was killed: {took} (peer 5s)")


def test_node_0_done_first_waits_for_the_job(make_job) -> None:  # type: ignore[no-untyped-def]
    """Node 0's ranks end 10 s before node 2's, far beyond the peer time-out: node 0's marun
    stays (the others would count it lost otherwise), and every node exits 0 together."""
    job = make_job(3, 3, {"DONE_AFTER": "1", "DONE_STAGGER": "2", "MARUN_PEER_TIMEOUT": "3"})
    job.start([0, 1, 2])
    assert job.finish() == {0: 0, 1: 0, 2: 0}, job.report()
    ends = [job.nodes[i].ended or 0 for i in range(3)]
    assert max(ends) - min(ends) < 3, job.report()  # together, not each when its ranks ended
    report = job.job_json()
    assert report["exit_code"] == 0 and report["first_failure"] is None
    assert [n["slots"][0]["outcome"] for n in report["nodes"]] == ["succeeded"] * 3  # type: ignore[index]


def test_forged_messages_do_not_stop_the_job(make_job) -> None:  # type: ignore[no-untyped-def]
    # Host 3 is on the job's network but not one of its nodes.
    job = make_job(4, 3, {"DONE_AFTER": "6"})
    job.start([0, 1, 2])
    job.wait_for(0, r"3/3 nodes up")
    from marun.job.protocol import encode

    forge = (
        "import socket, sys\n"
        "s = socket.create_connection((sys.argv[1], 36668), timeout=5)\n"
        "s.sendall(bytes.fromhex(sys.argv[2]))\n"
        "try:\n"
        "    s.recv(100)  # node 0 closes the connection: refused\n"
        "except OSError:\n"
        "    pass\n"
    )
    signed = [
        # the right job id and secret, from a host that is not the job's
        (3, TOKEN.encode(), JOB),
        # from a node of the job, without the secret
        (1, b"guessed", JOB),
        # from a node of the job, with another job's id
        (2, TOKEN.encode(), "another-job"),
    ]
    for host, secret, job_id in signed:
        lines = b"".join(
            encode(secret, {"job": job_id, "node": 1, "slot": 0, "type": kind, **fields})
            for kind, fields in (
                ("hello", {"host": "x"}),
                ("failure", {"failure": {"exit_code": 9, "why": "forged"}}),
            )
        )
        done = subprocess.run(
            job.cluster.command(
                host, [sys.executable, "-c", forge, job.cluster.address(0), lines.hex()]
            ),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        )
        print(f"forger on host {host}: exit {done.returncode} {done.stderr[-200:]}")
    codes = job.finish()
    assert codes == {0: 0, 1: 0, 2: 0}, job.report()
    out = job.nodes[0].output
    assert out.count("job_message_refused") >= 3, job.report()
    assert "not from one of the job's hosts" in out
    assert "bad signature" in out
    assert "is not this job's" in out
    assert job.job_json()["refused_messages"] == 3


# Real PyTorch gloo: rank 3 sleeps inside step 3; the others wait for it in all_reduce (gloo's
# own time-out is 30 minutes). Every rank prints a line a step, so the job goes silent.
GLOO_HANG = """\
import time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
for step in range(1000):
    if rank == 3 and step == 3:
        print("rank 3: stuck in step 3", flush=True)
        time.sleep(10**6)
    dist.all_reduce(t)
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(0.2)
"""


def test_a_hung_job_is_dumped_and_stopped(make_job) -> None:  # type: ignore[no-untyped-def]
    python = str(framework_python("torch"))
    job = make_job(2, 2, {}, python)
    job.options = ["--hang-timeout", "20"]
    job.start([0, 1], GLOO_HANG)
    stuck_at = job.wait_for(1, r"rank 3: stuck in step 3")
    codes = job.finish()
    assert codes == {0: 124, 1: 124}, job.report()
    took = {i: round((n.ended or 0) - stuck_at, 1) for i, n in job.nodes.items()}
    print(f"hang: the job ended this long after rank 3 got stuck: {took} (hang timeout 20s)")
    report = job.job_json()
    first = report["first_failure"]
    assert "no rank of the job wrote a line for 20s" in first["why"]  # type: ignore[index]
    stacks = first["stacks"]  # type: ignore[index]
    for rank in range(4):
        assert f"rank{rank} (rank {rank}, pid" in stacks, stacks
    # py-spy names the functions: three ranks wait in all_reduce, rank 3 in its sleep.
    assert stacks.count("all_reduce") >= 3, stacks
    # Each rank's log holds its own stacks too.
    log = job.cluster.host_dir(1) / "job" / "marun_logs" / "rank_3.log"
    assert "hang: stacks of rank3" in log.read_text()
