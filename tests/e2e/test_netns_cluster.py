"""The network-namespace test cluster (tests/netns_cluster.py), run for real: hosts with their
own names, addresses, /etc/hosts, /run and /dev/shm that reach each other over TCP and ssh, run
mpirun across them, and leave nothing behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from netns_cluster import NAME_PREFIX, NetnsCluster, available, cleanup_stale

PY = sys.executable
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": str(Path.home()),
    "LC_ALL": "C.UTF-8",
}
PORT = 5000

MakeCluster = Callable[..., NetnsCluster]

# Run on each host: what the host looks like from inside. argv: names to resolve.
PROBE = r"""
import json, os, socket, subprocess, sys
def resolve(name):
    try:
        return socket.gethostbyname(name)
    except OSError:
        return None
open(f"/dev/shm/marker-{socket.gethostname()}", "w").close()
eth0 = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"],
                      capture_output=True, text=True).stdout.split()
print(json.dumps({
    "hostname": socket.gethostname(),
    "fqdn": socket.getfqdn(),
    "eth0": eth0[3] if len(eth0) > 3 else None,
    "resolved": {name: resolve(name) for name in sys.argv[1:]},
    "shm": sorted(os.listdir("/dev/shm")),
    "run_sshd": os.path.isdir("/run/sshd"),
    "netns": os.readlink("/proc/self/ns/net"),
}))
"""

# A TCP server answering every connection with "<its host name> <peer address> <token>".
SERVER = r"""
import socket, sys
srv = socket.create_server(("0.0.0.0", int(sys.argv[1])))
while True:
    conn, peer = srv.accept()
    conn.sendall(f"{socket.gethostname()} {peer[0]} {sys.argv[2]}\n".encode())
    conn.close()
"""

# Connects to argv[1]:argv[2], retrying for up to argv[3] s (a link just brought up may drop
# the first SYN); prints the server's answer, or exits 1 with the last error.
CLIENT = r"""
import socket, sys, time
deadline = time.monotonic() + float(sys.argv[3])
while True:
    try:
        left = max(deadline - time.monotonic(), 0.2)
        with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=left) as s:
            print(s.makefile().readline().strip())
            break
    except OSError as exc:
        if time.monotonic() >= deadline:
            sys.exit(f"failed: {exc}")
        time.sleep(0.05)
"""

# Prints "<pid> ready" once a SIGTERM handler (exit 7) is in place, then waits for a signal.
SIGNALLED = r"""
import os, signal, subprocess, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print(os.getpid(), "ready", flush=True)
while True:
    signal.pause()
"""

# Leaves a daemon behind (double fork, own session, output detached) and prints its pid.
DAEMON = r"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print(os.getpid(), flush=True)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        time.sleep(120)
    os._exit(0)
os.wait()
"""

# Ignores SIGTERM, so teardown must escalate to SIGKILL.
STUBBORN = r"""
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(120)
"""

# A test run killed before its teardown: builds a cluster, starts a process in it, prints the
# cluster's id and the process ids, and dies by SIGKILL. argv: tests dir, workdir.
CRASHER = r"""
import os, signal, subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from netns_cluster import NetnsCluster
cluster = NetnsCluster(2, workdir=Path(sys.argv[2])).start()
null = subprocess.DEVNULL  # or the sleep holds our caller's pipes open
cluster.popen(0, ["sleep", "120"], {"PATH": "/usr/bin:/bin"}, stdout=null, stderr=null)
print(cluster.id, *cluster.pids(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _skip_unless_available() -> None:
    reason = available()
    if reason is not None:
        pytest.skip(f"network-namespace cluster: {reason}")


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[MakeCluster]:
    """Starts clusters in tmp_path; tears each down when the test ends, whatever happened."""
    _skip_unless_available()
    made: list[NetnsCluster] = []

    def make(n_hosts: int, **kwargs: object) -> NetnsCluster:
        cluster = NetnsCluster(n_hosts, workdir=tmp_path, **kwargs)  # type: ignore[arg-type]
        made.append(cluster)
        return cluster.start()

    yield make
    for cluster in made:
        cluster.teardown()


def _start_time(pid: int) -> str | None:
    """When a live `pid` started; None once it has ended (a zombie has ended: only its exit
    status waits for its parent, or for PID 1 whenever that gets to it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _snapshot(cluster: NetnsCluster) -> dict[int, str | None]:
    """The cluster's processes, each with its start time so a reused pid does not count."""
    return {pid: _start_time(pid) for pid in cluster.pids()}


def _netns_names() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def _assert_gone(cluster: NetnsCluster, processes: dict[int, str | None]) -> None:
    assert [n for n in _netns_names() if n.startswith(f"{NAME_PREFIX}{cluster.id}_")] == []
    alive = [pid for pid, start in processes.items() if start and _start_time(pid) == start]
    assert alive == []
    assert not cluster.dir.exists()
    assert cluster.pids() == []
    cluster.teardown()  # idempotent


def _serve(cluster: NetnsCluster, i: int, token: str) -> subprocess.Popen[bytes]:
    server = cluster.popen(i, [PY, "-c", SERVER, str(PORT), token], ENV)
    cluster.wait_listening(i, PORT)
    return server


def _connect(
    cluster: NetnsCluster, i: int, target: str, within: float = 10.0
) -> subprocess.CompletedProcess[str]:
    return cluster.run(i, [PY, "-c", CLIENT, target, str(PORT), str(within)], ENV, timeout=30)


def test_names_addresses_and_validation_without_starting(tmp_path: Path) -> None:
    cluster = NetnsCluster(2, job="job-x", task="worker", subnet_prefix="10.77.0", workdir=tmp_path)
    assert [cluster.name(i) for i in range(2)] == ["job-x-worker-0", "job-x-worker-1"]
    assert cluster.fqdn(1) == "job-x-worker-1.job-x"
    assert cluster.address(1) == "10.77.0.11"
    assert cluster.subnet == "10.77.0.0/24"
    assert re.fullmatch(rf"{NAME_PREFIX}{os.getpid()}_[0-9a-z]+_\d+_h1", cluster.netns(1))
    assert NetnsCluster(2, workdir=tmp_path).id != cluster.id
    with pytest.raises(IndexError):
        cluster.address(2)
    with pytest.raises(RuntimeError, match="not running"):
        cluster.popen(0, ["true"], ENV)
    for bad in ("10.77", "10.77.0.1", "300.1.2", "a.b.c"):
        with pytest.raises(ValueError, match="subnet_prefix"):
            NetnsCluster(2, subnet_prefix=bad, workdir=tmp_path)
    for n_hosts in (0, 201):
        with pytest.raises(ValueError, match="n_hosts"):
            NetnsCluster(n_hosts, workdir=tmp_path)
    cluster.teardown()  # never started: nothing to do
    assert not cluster.dir.exists()


@pytest.mark.e2e
def test_each_host_has_its_own_name_address_hosts_file_and_shm(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(3)
    n = cluster.n_hosts
    expected: dict[str, str | None] = {cluster.fqdn(i): cluster.address(i) for i in range(n)}
    expected |= {cluster.name(i): cluster.address(i) for i in range(n)}
    expected |= {"localhost": "127.0.0.1", "no-such-host.invalid": None}
    seen_netns = {os.readlink("/proc/self/ns/net")}
    for i in range(n):
        res = cluster.run(i, [PY, "-c", PROBE, *expected], ENV, timeout=30)
        assert res.returncode == 0, res.stderr
        host = json.loads(res.stdout)
        assert host["hostname"] == cluster.name(i)
        assert host["fqdn"] == cluster.fqdn(i)
        assert host["eth0"] == f"{cluster.address(i)}/24"
        assert host["resolved"] == expected
        assert host["shm"] == [f"marker-{cluster.name(i)}"]  # not the other hosts' markers
        assert host["run_sshd"] is True
        assert host["netns"] not in seen_netns
        seen_netns.add(host["netns"])
    assert not list(Path("/dev/shm").glob(f"marker-{cluster.job}-*"))  # the real one untouched


@pytest.mark.e2e
def test_processes_of_one_host_share_its_run_and_shm(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(2)
    write = "echo hi > /run/note && echo hi > /dev/shm/note"
    assert cluster.run(0, ["sh", "-c", write], ENV, timeout=10).returncode == 0
    read = ["cat", "/run/note", "/dev/shm/note"]
    for pid1 in (False, True):
        assert cluster.run(0, read, ENV, timeout=10, pid1=pid1).stdout == "hi\nhi\n"
    other = cluster.run(1, read, ENV, timeout=10)
    assert other.returncode != 0
    assert not Path("/run/note").exists()


@pytest.mark.e2e
def test_hosts_reach_each_other_over_tcp(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(3)
    server = _serve(cluster, 1, "token")
    for target in (cluster.fqdn(1), cluster.name(1), cluster.address(1)):
        res = _connect(cluster, 0, target)
        assert res.stdout.split() == [cluster.name(1), cluster.address(0), "token"], res.stderr
    server.kill()
    server.wait()


@pytest.mark.e2e
def test_two_clusters_side_by_side_do_not_collide(make_cluster: MakeCluster) -> None:
    # Same job, host names, addresses and port on purpose: only the namespaces keep them apart.
    first, second = (
        make_cluster(2, subnet_prefix="10.77.0"),
        make_cluster(2, subnet_prefix="10.77.0"),
    )
    assert first.id != second.id
    assert not {first.netns(i) for i in range(2)} & {second.netns(i) for i in range(2)}
    servers = [_serve(first, 1, "first"), _serve(second, 1, "second")]
    assert _connect(first, 0, first.fqdn(1)).stdout.split()[-1] == "first"
    assert _connect(second, 0, second.fqdn(1)).stdout.split()[-1] == "second"
    assert set(first.pids()).isdisjoint(second.pids())
    for server in servers:
        server.kill()
        server.wait()


@pytest.mark.e2e
@pytest.mark.parametrize("pid1", [False, True], ids=["plain", "pid1"])
def test_popen_leads_a_process_group_that_a_test_can_signal(
    make_cluster: MakeCluster, pid1: bool
) -> None:
    cluster = make_cluster(1)
    proc = cluster.popen(
        0, [PY, "-c", SIGNALLED], ENV, pid1=pid1, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    pid, word = proc.stdout.readline().split()
    assert word == "ready"
    # Without pid1 nothing stands between proc and the command; with it the command is PID 1.
    assert int(pid) == (1 if pid1 else proc.pid)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == 7  # the command's own status, through unshare with pid1
    proc.stdout.close()


@pytest.mark.e2e
def test_teardown_ends_every_process_and_removes_everything(tmp_path: Path) -> None:
    _skip_unless_available()
    cluster = NetnsCluster(2, workdir=tmp_path)
    with cluster:
        stubborn = cluster.popen(0, [PY, "-c", STUBBORN], ENV, stdout=subprocess.PIPE)
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
        daemon = cluster.run(1, [PY, "-c", DAEMON], ENV, timeout=10)
        init = cluster.popen(
            1, ["sh", "-c", "echo ready; exec sleep 120"], ENV, pid1=True, stdout=subprocess.PIPE
        )
        assert init.stdout is not None and init.stdout.readline() == b"ready\n"
        processes = _snapshot(cluster)
        # the stubborn one, the daemon, and unshare with its PID 1 `sleep`
        assert {stubborn.pid, int(daemon.stdout), init.pid} <= set(processes)
        assert len(cluster.host_pids(1)) == 3
    _assert_gone(cluster, processes)
    assert stubborn.returncode == -signal.SIGKILL  # ignored SIGTERM: escalated
    stubborn.stdout.close()
    init.stdout.close()


@pytest.mark.e2e
def test_teardown_runs_after_an_exception_in_the_with_block(tmp_path: Path) -> None:
    _skip_unless_available()
    cluster = NetnsCluster(2, workdir=tmp_path)
    processes: dict[int, str | None] = {}
    with pytest.raises(KeyError, match="boom"), cluster:
        _serve(cluster, 1, "token")
        processes.update(_snapshot(cluster))
        raise KeyError("boom")
    assert processes
    _assert_gone(cluster, processes)


@pytest.mark.e2e
def test_cleanup_stale_removes_what_a_killed_run_left(
    make_cluster: MakeCluster, tmp_path: Path
) -> None:
    live = make_cluster(1)  # a cluster whose creator (this test) lives: must be kept
    crashed = subprocess.run(
        [PY, "-c", CRASHER, str(Path(__file__).parent.parent), str(tmp_path / "crashed")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    cluster_id, *pids = crashed.stdout.split()
    prefix = f"{NAME_PREFIX}{cluster_id}_"
    left = {int(pid): _start_time(int(pid)) for pid in pids}  # the sleep, unless cleaned already
    names = {f"{prefix}sw", f"{prefix}h0", f"{prefix}h1"}

    removed = cleanup_stale()

    # Run alone, this call finds all three; a test run in parallel may clean some first (its
    # clusters' start() calls cleanup_stale() too), so only what is left after is exact.
    assert {n for n in removed if n.startswith(prefix)} <= names
    assert not [n for n in _netns_names() if n.startswith(prefix)]
    assert not [pid for pid, start in left.items() if start and _start_time(pid) == start]
    assert live.netns(0) in _netns_names()


@pytest.mark.e2e
def test_cut_link_restore_link_and_drop_host(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(2)
    server = _serve(cluster, 1, "token")
    assert _connect(cluster, 0, cluster.fqdn(1)).returncode == 0

    cluster.cut_link(1)
    cut = _connect(cluster, 0, cluster.fqdn(1), within=0.5)
    assert cut.returncode == 1
    assert "timed out" in cut.stderr  # silence, not a refusal: like a partitioned node
    assert server.poll() is None  # host 1 itself keeps running

    cluster.restore_link(1)
    assert _connect(cluster, 0, cluster.fqdn(1)).returncode == 0

    cluster.drop_host(1)
    assert server.wait(timeout=10) == -signal.SIGKILL
    assert cluster.host_pids(1) == []
    dropped = _connect(cluster, 0, cluster.fqdn(1), within=0.5)
    assert dropped.returncode == 1
    assert "timed out" in dropped.stderr


def _ssh_tools() -> dict[str, str]:
    sshd = shutil.which("sshd") or (
        "/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None
    )
    tools = {"sshd": sshd, **{t: shutil.which(t) for t in ("ssh", "ssh-keygen", "mpirun")}}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        pytest.skip(
            f"not installed: {', '.join(missing)} (apt-get install openssh-server openmpi-bin)"
        )
    return {name: path for name, path in tools.items() if path is not None}


def _sshd_config(cluster: NetnsCluster, i: int, host_key: Path, authorized_keys: Path) -> Path:
    path = cluster.host_dir(i) / "sshd_config"
    path.write_text(
        "\n".join(
            [
                "Port 2222",
                f"HostKey {host_key}",
                "PidFile /run/sshd.pid",
                f"AuthorizedKeysFile {authorized_keys}",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",  # the keys live in pytest's tmp directory
                "UseDNS no",
                "PrintMotd no",
                "PrintLastLog no",
                # Open MPI's session directory for this host's orted: gone with the cluster.
                f"SetEnv TMPDIR={cluster.host_dir(i) / 'tmp'}",
            ]
        )
        + "\n"
    )
    return path


@pytest.mark.e2e
def test_sshd_accepts_a_key_login_and_mpirun_spans_hosts(
    make_cluster: MakeCluster, tmp_path: Path
) -> None:
    tools = _ssh_tools()
    cluster = make_cluster(3)
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("host_key", "id_ed25519"):
        subprocess.run(
            [tools["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)],
            check=True,
            timeout=30,
        )
    key = keys / "id_ed25519"
    authorized = keys / "authorized_keys"
    shutil.copy(keys / "id_ed25519.pub", authorized)
    known_hosts = keys / "known_hosts"
    host_pub = (keys / "host_key.pub").read_text().split()
    known_hosts.write_text(f"[{cluster.fqdn(1)}]:2222 {host_pub[0]} {host_pub[1]}\n")

    daemons = {}
    for i in (1, 2):
        config = _sshd_config(cluster, i, keys / "host_key", authorized)
        with (cluster.host_dir(i) / "sshd.log").open("w") as log:
            daemons[i] = cluster.popen(
                i, [tools["sshd"], "-D", "-e", "-f", str(config)], ENV, stderr=log
            )
        cluster.wait_listening(i, 2222)

    def logs() -> str:
        return "\n".join((cluster.host_dir(i) / "sshd.log").read_text() for i in daemons)

    ssh_argv = [
        *(tools["ssh"], "-F", "/dev/null", "-i", str(key), "-o", "BatchMode=yes"),
        *("-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"),
        *("-p", "2222", cluster.fqdn(1), "hostname"),
    ]
    ssh = cluster.run(0, ssh_argv, ENV, timeout=60)
    assert (ssh.returncode, ssh.stdout.strip()) == (0, cluster.name(1)), ssh.stderr + logs()

    rsh_args = (
        f"-p 2222 -i {key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
        " -o BatchMode=yes"
    )
    mpirun_argv = [
        *(tools["mpirun"], "--allow-run-as-root", "-np", "2"),
        *("-H", f"{cluster.fqdn(1)}:1,{cluster.fqdn(2)}:1"),
        *("--mca", "plm_rsh_args", rsh_args, "--mca", "btl", "tcp,self"),
        *("--mca", "orte_keep_fqdn_hostnames", "1", "hostname"),
    ]
    mpirun_env = {**ENV, "TMPDIR": str(cluster.host_dir(0) / "tmp")}
    mpirun = cluster.run(0, mpirun_argv, mpirun_env, timeout=60)
    assert mpirun.returncode == 0, mpirun.stderr + logs()
    assert sorted(mpirun.stdout.split()) == [cluster.name(1), cluster.name(2)]
    assert all(d.poll() is None for d in daemons.values())  # sshd -D still serving
