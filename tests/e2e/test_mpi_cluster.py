"""MPI mode end to end on a real multi-host cluster: network-namespace hosts (netns_cluster.py)
with their own names, addresses, /etc/hosts, /run and /dev/shm, each running `marun run --mode
mpi` as its PID 1, under the mpi4py venv's interpreter, with the environment exactly as the
platform sets it (MA_VJ_NAME, MA_TASK_NAME=worker, VC_TASK_INDEX, MA_NUM_HOSTS, MA_NUM_GPUS; host
names `<job>-worker-<i>.<job>` resolved through each host's /etc/hosts) and a Volcano-style ssh
secret (id_rsa, id_rsa.pub, authorized_keys, config) shared by every host, named by MARUN_SSH_DIR.
Real sshd, real ssh, real mpirun and orted, real mpi4py ranks. The nodes are joined by the
job's coordination (marun.job, node 0's job_port), as in every mode: node 0 runs mpirun, the
others are daemons only (sshd) and end with the job, with its exit code.

The hosts share the machine's file system (/tmp included), so each gets its own MARUN_RUN_DIR,
TMPDIR and working directory; the platform's containers have theirs anyway. Hosts start in a
random order with random delays (the seed is in every failure message). No GPU exists here:
MA_NUM_GPUS=2 only sets the slots per host.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from local_cluster import framework_python

from conftest import REPO, shown_while_running
from netns_cluster import NAME_PREFIX, NetnsCluster, available

pytestmark = pytest.mark.e2e

JOB = "ma-job-0a1b2c"
GPUS = 2
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEADLINE = 120  # seconds a node may take; a hang guard only
USER_UID = 1000  # the non-root run's user

MakeCluster = Callable[[int], NetnsCluster]

RANK_LINE = re.compile(r"rank (\d+)/(\d+) on (\S+): allreduce sum (\d+) \(expected (\d+)\)")

# A rank that exits 3 while the others wait for it in a collective. os._exit: a plain
# sys.exit() after MPI_Init would wait in MPI_Finalize for ranks that wait for it.
FAIL_RANK_3 = """\
import os
from mpi4py import MPI
comm = MPI.COMM_WORLD
if comm.Get_rank() == 3:
    print("rank 3 exits with 3", flush=True)
    os._exit(3)
comm.Barrier()
"""

# Every rank says it runs, then works (sleeps) for longer than any test waits.
LONG_JOB = """\
import socket, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
print(f"rank {comm.Get_rank()} running on {socket.gethostname()}", flush=True)
time.sleep(600)
"""


@dataclass
class Node:
    index: int
    proc: subprocess.Popen[bytes]
    out: Path

    @property
    def output(self) -> str:
        return self.out.read_text(errors="replace")


class MpiJob:
    """One job: `marun run --mode mpi -- SCRIPT` on some hosts of `cluster`."""

    def __init__(
        self,
        cluster: NetnsCluster,
        ssh_dir: Path,
        python: Path,
        *,
        uid: int = 0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.ssh_dir = ssh_dir
        self.python = python
        self.uid = uid
        self.extra_env = dict(env or {})
        self.seed = random.randrange(1 << 30)
        self.nodes: dict[int, Node] = {}

    def env(self, i: int) -> dict[str, str]:
        host = self.cluster.host_dir(i)
        home = "/root" if self.uid == 0 else f"/home/{_user_name(self.uid)}"
        return {
            "PATH": f"{self.python.parent}:{SYSTEM_PATH}",
            "HOME": home,
            "LC_ALL": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            # the platform's
            "MA_VJ_NAME": JOB,
            "MA_TASK_NAME": "worker",
            "VC_TASK_INDEX": str(i),
            "MA_NUM_HOSTS": str(self.cluster.n_hosts),
            "MA_NUM_GPUS": str(GPUS),
            # this host's own files; Volcano's ssh secret
            "MARUN_RUN_DIR": str(host / "run"),
            "TMPDIR": str(host / "tmp"),
            "MARUN_SSH_DIR": str(self.ssh_dir),
            "MARUN_GRACE_PERIOD": "10",
            **self.extra_env,
        }

    def start(self, script: Path, hosts: Sequence[int]) -> None:
        rng = random.Random(self.seed)
        order = list(hosts)
        rng.shuffle(order)
        for i in order:
            time.sleep(rng.uniform(0, 0.6))
            work = self.cluster.host_dir(i) / "job"
            work.mkdir()
            shutil.copy(script, work / script.name)
            _give(self.uid, self.cluster.host_dir(i), work, work / script.name)
            _give(self.uid, self.cluster.host_dir(i) / "tmp")
            argv = [str(self.python), "-m", "marun", "run", "--mode", "mpi", "--", script.name]
            if self.uid:
                argv = [*_as_user(self.uid), *argv]
            out = self.cluster.host_dir(i) / "console.txt"
            with out.open("wb") as sink:
                proc = self.cluster.popen(
                    i,
                    argv,
                    self.env(i),
                    pid1=True,  # marun is the container's entrypoint
                    cwd=work,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            self.nodes[i] = Node(i, proc, out)

    def finish(self) -> dict[int, int]:
        """Every node's exit code, once all have ended."""
        deadline = time.monotonic() + DEADLINE
        for node in self.nodes.values():
            try:
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"node {node.index} still runs after {DEADLINE}s\n{self.report()}")
        return {i: node.proc.returncode for i, node in self.nodes.items()}

    def wait_for(self, i: int, pattern: str, count: int) -> None:
        """Until node i's console shows `count` lines matching `pattern`."""
        node = self.nodes[i]

        def shown() -> bool:
            return len(re.findall(pattern, node.output)) >= count

        if not shown_while_running(shown, node.proc, DEADLINE, every=0.1):
            pytest.fail(f"node {i} never showed {count} x {pattern!r}\n{self.report()}")

    def job_json(self) -> dict[str, Any]:
        """Node 0's job.json: every node's end as the coordinator saw it."""
        path = self.cluster.host_dir(0) / "job" / "marun_logs" / "job.json"
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def report(self) -> str:
        parts = [f"seed {self.seed} (host start order and delays)"]
        for i, node in sorted(self.nodes.items()):
            parts.append(f"--- node {i}: exit {node.proc.poll()}\n{node.output[-6000:]}")
        return "\n".join(parts)

    def assert_nothing_left(self) -> None:
        """No process of the job on any host (sshd, orted, ranks, marun), and none left for the
        kernel to kill: each marun (PID 1 of its host) ended only after its supervisor had seen
        every descendant end (it waits for them all, orphans included), none after a SIGKILL.
        Then teardown leaves no namespace."""
        assert self.cluster.pids() == [], self.report()
        for node in self.nodes.values():
            assert "killing" not in node.output, self.report()
            assert "processes_left_after_sigkill" not in node.output, self.report()
        self.cluster.teardown()
        names = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout
        assert f"{NAME_PREFIX}{self.cluster.id}_" not in names


def _user_name(uid: int) -> str:
    import pwd

    return pwd.getpwuid(uid).pw_name


def _as_user(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--init-groups", "--"]


def _give(uid: int, *paths: Path) -> None:
    for path in paths:
        os.chown(path, uid, uid)


def volcano_ssh_secret(directory: Path, mode: int) -> Path:
    """What Volcano's ssh plugin mounts: one key pair for the whole job, authorized by itself,
    and a client config; files of root's with `mode` (0600 under /root/.ssh, 0644 elsewhere for
    a non-root user)."""
    directory.mkdir(mode=0o700 if mode == 0o600 else 0o755)
    key = directory / "id_rsa"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "volcano", "-f", str(key)],
        check=True,
        timeout=30,
    )
    shutil.copy(directory / "id_rsa.pub", directory / "authorized_keys")
    (directory / "config").write_text("StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n")
    for path in directory.iterdir():
        path.chmod(mode)
    return directory


def rank_lines(text: str) -> dict[int, tuple[int, str, int, int]]:
    return {int(m[1]): (int(m[2]), m[3], int(m[4]), int(m[5])) for m in RANK_LINE.finditer(text)}


def _needs(*tools: str) -> None:
    reason = available()
    if reason is not None:
        pytest.skip(f"network-namespace cluster: {reason}")
    missing = [
        t for t in tools if shutil.which(t, path=f"{os.environ['PATH']}:{SYSTEM_PATH}") is None
    ]
    if missing:
        pytest.skip(
            f"not installed: {', '.join(missing)} (apt-get install openssh-server openmpi-bin)"
        )


@pytest.fixture
def workdir() -> Iterator[Path]:
    """Where the clusters and the ssh secret live: a directory every user can reach (pytest's
    tmp_path sits in a root-only directory, and the non-root test runs as another user)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="marun-mpi-e2e-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_cluster(workdir: Path) -> Iterator[MakeCluster]:
    _needs("sshd", "ssh", "ssh-keygen", "mpirun", "orted")
    made: list[NetnsCluster] = []

    def make(n_hosts: int) -> NetnsCluster:
        cluster = NetnsCluster(n_hosts, job=JOB, task="worker", workdir=workdir)
        made.append(cluster)
        return cluster.start()

    yield make
    for cluster in made:
        cluster.teardown()


@pytest.fixture
def mpi_python() -> Path:
    return framework_python("mpi")


def _script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_allreduce_over_three_hosts(
    make_cluster: MakeCluster, mpi_python: Path, tmp_path: Path
) -> None:
    cluster = make_cluster(3)
    job = MpiJob(cluster, volcano_ssh_secret(tmp_path / "ssh", 0o600), mpi_python)
    job.start(REPO / "examples" / "mpi_allreduce.py", hosts=range(3))
    codes = job.finish()
    assert codes == {0: 0, 1: 0, 2: 0}, job.report()

    ranks = rank_lines(job.nodes[0].output)  # mpirun's --tag-output lines reach node 0's console
    size = 3 * GPUS
    assert sorted(ranks) == list(range(size)), job.report()
    assert {total for _, _, total, _ in ranks.values()} == {size * (size + 1) // 2}
    assert all(world == size and total == expected for world, _, total, expected in ranks.values())
    assert {host for _, host, _, _ in ranks.values()} == {cluster.name(i) for i in range(3)}
    assert "cluster formation: 3/3 hosts ready" in job.nodes[0].output
    report = job.job_json()
    assert report["exit_code"] == 0 and report["first_failure"] is None, report
    assert [n["slots"][0]["exit_code"] for n in report["nodes"]] == [0, 0, 0], report
    job.assert_nothing_left()


def test_a_host_that_never_starts(
    make_cluster: MakeCluster, mpi_python: Path, tmp_path: Path
) -> None:
    """Host 2 never runs marun: nothing starts (the job's arrival barrier), and once
    arrival_timeout has passed every node that came exits 1, naming node 2."""
    cluster = make_cluster(3)
    # Long enough for host 1's marun to arrive on a loaded machine; host 2 never does.
    env = {"MARUN_ARRIVAL_TIMEOUT": "8", "MARUN_PEER_TIMEOUT": "3"}
    job = MpiJob(cluster, volcano_ssh_secret(tmp_path / "ssh", 0o600), mpi_python, env=env)
    job.start(REPO / "examples" / "mpi_allreduce.py", hosts=(0, 1))
    codes = job.finish()
    assert codes == {0: 1, 1: 1}, job.report()
    for i in (0, 1):
        said = job.nodes[i].output
        assert f"1 of 3 nodes missing after 8s: node 2 ({cluster.fqdn(2)}) never reported" in said
        assert "cluster formation" not in said  # mpirun's side never started
    report = job.job_json()
    assert report["exit_code"] == 1 and report["nodes"][2]["slots"][0]["outcome"] == "missing"
    assert rank_lines(job.nodes[0].output) == {}
    job.assert_nothing_left()


# print() with several arguments under PYTHONUNBUFFERED=1 is several writes: Open MPI tags each.
IN_PIECES = """\
import sys
from mpi4py import MPI
rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
for step in range(3):
    print("rank", rank, "of", size, "step", step, "printed", "in", "pieces")
    print("rank", rank, "to stderr", "in", "pieces", file=sys.stderr)
"""


def test_lines_printed_in_pieces_come_out_whole(
    make_cluster: MakeCluster, mpi_python: Path, tmp_path: Path
) -> None:
    cluster = make_cluster(2)
    job = MpiJob(cluster, volcano_ssh_secret(tmp_path / "ssh", 0o600), mpi_python)
    job.start(_script(tmp_path, "pieces.py", IN_PIECES), hosts=range(2))
    codes = job.finish()
    assert codes == {0: 0, 1: 0}, job.report()
    out = job.nodes[0].output
    size = 2 * GPUS
    for rank in range(size):
        for step in range(3):
            line = f"[1,{rank}]<stdout>:rank {rank} of {size} step {step} printed in pieces\n"
            assert line in out, job.report()
        assert out.count(f"[1,{rank}]<stderr>:rank {rank} to stderr in pieces\n") == 3
    # No tag in the middle of a line: each line is one rank's, whole.
    assert not re.search(r"\S\[1,\d+\]<std", out), job.report()


def test_a_rank_exits_3(make_cluster: MakeCluster, mpi_python: Path, tmp_path: Path) -> None:
    """Rank 3 (on node 1: two slots per host) exits 3: mpirun ends with 3, node 0 with it, and
    the job's fail-fast stops every node with 3, each naming the failure; job.json has it."""
    cluster = make_cluster(3)
    job = MpiJob(cluster, volcano_ssh_secret(tmp_path / "ssh", 0o600), mpi_python)
    job.start(_script(tmp_path, "fail_rank_3.py", FAIL_RANK_3), hosts=range(3))
    codes = job.finish()
    assert codes == {0: 3, 1: 3, 2: 3}, job.report()
    assert "mpirun exited with status 3 (rank 3 exited with code 3 first)" in job.nodes[0].output
    for i in range(3):
        said = job.nodes[i].output
        assert "the job stopped on every node, exit code 3" in said, job.report()
        assert "first failure: node 0 " in said and "process mpi-leader, exit code 3" in said
        assert "rank 3 exited with code 3 first" in said, job.report()
    report = job.job_json()
    assert report["exit_code"] == 3, report
    assert (report["first_failure"]["node"], report["first_failure"]["exit_code"]) == (0, 3)
    assert [n["slots"][0]["exit_code"] for n in report["nodes"]] == [3, 3, 3], report
    job.assert_nothing_left()


def test_sigterm_to_node_0_mid_run(
    make_cluster: MakeCluster, mpi_python: Path, tmp_path: Path
) -> None:
    """The platform stops node 0's container: every rank on every host ends, every node's marun
    exits non-zero, and nothing is left."""
    cluster = make_cluster(3)
    job = MpiJob(cluster, volcano_ssh_secret(tmp_path / "ssh", 0o600), mpi_python)
    job.start(_script(tmp_path, "long_job.py", LONG_JOB), hosts=range(3))
    job.wait_for(0, r"rank \d+ running on", 3 * GPUS)
    os.killpg(job.nodes[0].proc.pid, signal.SIGTERM)  # reaches marun, PID 1 of node 0
    codes = job.finish()
    assert codes == {0: 143, 1: 143, 2: 143}, job.report()
    assert "node 0 received SIGTERM; mpirun exited with status" in job.nodes[0].output
    for i in (1, 2):
        assert "the job stopped on every node, exit code 143" in job.nodes[i].output
    job.assert_nothing_left()


def test_sigterm_to_node_0_before_every_node_arrived(
    make_cluster: MakeCluster, mpi_python: Path, tmp_path: Path
) -> None:
    """Stopped while it waits for a host that never comes, node 0 stops the node that came."""
    cluster = make_cluster(3)
    job = MpiJob(cluster, volcano_ssh_secret(tmp_path / "ssh", 0o600), mpi_python)
    job.start(REPO / "examples" / "mpi_allreduce.py", hosts=(0, 1))
    job.wait_for(0, r"2/3 nodes up", 1)
    os.killpg(job.nodes[0].proc.pid, signal.SIGTERM)
    codes = job.finish()
    assert codes == {0: 143, 1: 143}, job.report()
    assert "cluster formation" not in job.nodes[0].output  # mpirun's side never started
    assert "stopped by SIGTERM" in job.nodes[1].output, job.report()
    job.assert_nothing_left()


# Every rank says it runs, then waits, silent and idle (a sleep, not an MPI call: Open MPI's
# progress loop would spin), for longer than any test waits: a hung job.
SILENT_IDLE = """\
import socket, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
print(f"rank {comm.Get_rank()} running on {socket.gethostname()}", flush=True)
time.sleep(600)
print("never", flush=True)
"""


def test_the_hang_watchdog_stops_a_silent_idle_mpi_job(
    make_cluster: MakeCluster, mpi_python: Path, tmp_path: Path
) -> None:
    """--hang-timeout in MPI mode: the ranks (mpirun's on node 0, orted's under sshd on node 1)
    go silent and use no CPU; node 0's watchdog judges the job hung and every node ends with the
    hang exit code (124), naming why; job.json keeps the reason."""
    cluster = make_cluster(2)
    job = MpiJob(
        cluster,
        volcano_ssh_secret(tmp_path / "ssh", 0o600),
        mpi_python,
        env={"MARUN_HANG_TIMEOUT": "6"},
    )
    job.start(_script(tmp_path, "silent_idle.py", SILENT_IDLE), hosts=range(2))
    job.wait_for(0, r"rank \d+ running on", 2 * GPUS)
    codes = job.finish()
    assert codes == {0: 124, 1: 124}, job.report()
    why = re.compile(
        r"no rank of the job wrote a line for 6s, and its ranks used [0-9.]+s of CPU in that "
        r"time: nothing runs"
    )
    for i in range(2):
        assert why.search(job.nodes[i].output), job.report()
        assert "the job stopped on every node, exit code 124" in job.nodes[i].output, job.report()
    report = job.job_json()
    assert report["exit_code"] == 124, report
    assert why.search(report["first_failure"]["why"]), report
    assert "never" not in job.nodes[0].output
    if (mpi_python.parent / "py-spy").exists():  # marun[hang]: the ranks' stacks
        stacks = report["first_failure"]["stacks"]
        # Node 0's ranks, below mpi-leader, each in its sleep. Node 1's (below its sshd, a
        # daemon) are not sampled yet: the supervisor dumps no daemon and the coordinator
        # judges no daemons-only node (named gap, CHANGELOG part 12).
        assert "[below mpi-leader: pid" in stacks, stacks
        assert stacks.count("(silent_idle.py:6)") == GPUS, stacks
    job.assert_nothing_left()


# Every rank works on the CPU, silent, until the watchdog has judged the job (the test then
# writes the file go_on), then says it is done. Rank 0 computes silently; the others sleep
# until then and meet it at the barrier (one busy rank makes the quiet job a working one: one
# core of CPU, not four). A fixed run time could end before the judgement on a slow machine.
BUSY_QUIET = """\
import os, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
n = 0
while not os.path.exists(GO_ON):
    if comm.Get_rank() == 0:
        end = time.monotonic() + 0.1
        while time.monotonic() < end:
            n += 1
    else:
        time.sleep(0.1)
comm.Barrier()
print(f"rank {comm.Get_rank()} done", flush=True)
"""


def test_the_hang_watchdog_leaves_a_busy_quiet_mpi_job_alone(
    make_cluster: MakeCluster, mpi_python: Path, tmp_path: Path
) -> None:
    """Silent past the hang time-out but working: judged not hung, and left to end 0. In MPI
    mode the ranks are not marun's children (mpirun's on node 0, orted's under sshd elsewhere):
    their stacks, not only mpi-leader's and sshd's, are what the watchdog compares (with
    py-spy, marun[hang], in the venv: without it a busy job is never judged hung anyway)."""
    if not (mpi_python.parent / "py-spy").exists():
        pytest.skip("py-spy is not installed in the mpi venv (scripts/frameworks.sh mpi)")
    cluster = make_cluster(2)
    job = MpiJob(
        cluster,
        volcano_ssh_secret(tmp_path / "ssh", 0o600),
        mpi_python,
        env={"MARUN_HANG_TIMEOUT": "6"},
    )
    go_on = tmp_path / "go_on"
    script = BUSY_QUIET.replace("GO_ON", repr(str(go_on)))
    job.start(_script(tmp_path, "busy_quiet.py", script), hosts=range(2))
    job.wait_for(0, "job_quiet_but_busy", 1)  # (a job judged hung ends first: said)
    go_on.touch()
    codes = job.finish()
    assert codes == {0: 0, 1: 0}, job.report()
    assert job.nodes[0].output.count(" done") >= 2 * GPUS, job.report()
    job.assert_nothing_left()


def _python_for(uid: int, venv_python: Path) -> tuple[Path, dict[str, str]]:
    """An interpreter `uid` can run with mpi4py and marun importable. The framework venv's
    interpreter may be a link into root's private directory (pyenv under /root): then the
    system's python3 of the same version, given the venv's packages and marun's source by
    PYTHONPATH."""
    probe = subprocess.run(
        [*_as_user(uid), "sh", "-c", 'test -x "$1"', "sh", os.path.realpath(venv_python)],
        check=False,
    )
    if probe.returncode == 0:
        return venv_python, {}
    system = Path("/usr/bin/python3")
    version = "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
    versions = {
        str(p): subprocess.run(
            [str(p), "-c", version], capture_output=True, text=True, check=True
        ).stdout
        for p in (venv_python, system)
        if p.exists()
    }
    if len(set(versions.values())) != 1 or len(versions) != 2:
        pytest.skip(f"uid {uid} cannot run {venv_python} and {system} is another version")
    minor = versions[str(system)].strip()
    site = venv_python.parent.parent / "lib" / f"python{minor}" / "site-packages"
    return system, {"PYTHONPATH": f"{REPO / 'src'}:{site}"}


def test_non_root_job(make_cluster: MakeCluster, mpi_python: Path, workdir: Path) -> None:
    """Two hosts, marun and everything it starts as uid 1000: sshd on port 36666 with its own
    host key, letting in only that user with the job's key (Volcano mounts root's secret 0644
    for a non-root user), mpirun as that user."""
    if os.getuid() != 0:
        pytest.skip("needs root to become another user")
    try:
        user = _user_name(USER_UID)
    except KeyError:
        pytest.skip(f"no user with uid {USER_UID}")
    python, env = _python_for(USER_UID, mpi_python)
    cluster = make_cluster(2)
    ssh_dir = volcano_ssh_secret(workdir / "ssh", 0o644)
    job = MpiJob(cluster, ssh_dir, python, uid=USER_UID, env=env)
    job.start(REPO / "examples" / "mpi_allreduce.py", hosts=range(2))
    codes = job.finish()
    assert codes == {0: 0, 1: 0}, job.report()
    ranks = rank_lines(job.nodes[0].output)
    assert sorted(ranks) == list(range(2 * GPUS)), job.report()
    assert {host for _, host, _, _ in ranks.values()} == {cluster.name(0), cluster.name(1)}
    assert f"[1:sshd] Accepted publickey for {user} " in job.nodes[1].output
    run_dir = cluster.host_dir(1) / "run" / JOB
    assert run_dir.stat().st_uid == USER_UID
    assert (run_dir / "ssh_host_ed25519_key").stat().st_uid == USER_UID
    job.assert_nothing_left()
