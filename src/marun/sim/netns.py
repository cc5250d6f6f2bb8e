"""A multi-host cluster on one Linux machine, built from network namespaces: the end-to-end
tests' MPI hosts, and what `marun simulate --mode mpi` runs a job on.

Host i looks to the programs on it like pod i of a Volcano job: host name `<job>-<task>-<i>`,
FQDN `<job>-<task>-<i>.<job>`, one address on `eth0` and a default route through it, an
`/etc/hosts` that names every host of the cluster, and its own `/run` (with `/run/sshd`) and
`/dev/shm`. Nothing is created in the root network namespace:

    mrn<id>_sw    the switch: bridge br0 holding the gateway <prefix>.1, one veth port p<i> a host
    mrn<id>_h<i>  host i: eth0 = <prefix>.<10+i>/24

Each host also has one UTS and one mount namespace, created once and held open by an *anchor*
process (`cat` reading a pipe from the creator, so it ends by itself when the creator dies).
Every command started on host i enters all three namespaces (`nsenter`), so all processes of a
host share its host name, `/run` and `/dev/shm`, as the processes of one pod do; a fresh
`unshare` per command would give each command a `/run` of its own. The private `/etc/resolv.conf`
points at a name server that does not exist inside the host, so a name missing from
`/etc/hosts` fails at once instead of waiting on a DNS server the host cannot reach.

The rest of the file system is the machine's own, shared by every host: `/tmp`, the venvs, the
test's files. Give each host its own files under `host_dir(i)` (TMPDIR for Open MPI's session
directory, sshd's config and logs); teardown removes them with the cluster's directory.

`<id>` is `<creator pid>_<creator start time, base 36>_<sequence>`: unique across parallel test
runs and within one, and it tells `cleanup_stale()` whether the creator is still alive. The /24
is derived from it, so clusters side by side also differ in addresses (they could not collide
anyway: each has its own switch).

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), `ip` (iproute2), `unshare`, `nsenter`, `mount`
(util-linux) and `hostname`; `available()` says why not when it cannot work.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import shutil
import signal
import subprocess
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from marun.sim.netns_system import (
    _NETNS_DIR,
    _SYSTEM_PATH,
    NAME_PREFIX,
    NsId,
    _base36,
    _end_processes,
    _ip_batch,
    _need,
    _netns_names,
    _start_time,
    _tool,
    cleanup_stale,
)

_TOOLS = ("ip", "unshare", "nsenter", "mount", "hostname")
_MAX_HOSTS = 200  # host addresses are .10 to .209 of the /24
_SEQUENCE = itertools.count()

# Run by host i's anchor inside its new UTS and mount namespaces (propagation private, so no
# mount reaches the root namespace). $1 host name, $2 hosts file, $3 resolv.conf.
# /run is mounted before the binds because /etc/resolv.conf may be a symlink into /run
# (systemd-resolved): the bind then lands on its target inside the host's own /run.
_HOST_SETUP = r"""
set -e
hostname "$1"
mount -t tmpfs -o mode=755 mrn-run /run
mkdir -m 755 /run/sshd
mount -t tmpfs -o mode=1777 mrn-shm /dev/shm
bind_over() {
    target=$(readlink -m "$2")
    if [ ! -e "$target" ]; then mkdir -p "${target%/*}"; : > "$target"; fi
    mount --bind "$1" "$target"
}
bind_over "$2" /etc/hosts
bind_over "$3" /etc/resolv.conf
echo ready
exec cat > /dev/null
"""

_RESOLV_CONF = """\
# netns test cluster: no name server runs here, so a name missing from /etc/hosts fails at once
nameserver 127.0.0.1
options timeout:1 attempts:1
"""


def available() -> str | None:
    """None when a cluster can be built here, else why not (for `pytest.skip`)."""
    if not Path("/proc/self/ns/net").exists():
        return "no network namespaces (needs Linux)"
    if os.geteuid() != 0:
        return "needs root (ip netns, mount)"
    for name in _TOOLS:
        if _tool(name) is None:
            return f"`{name}` not found (apt-get install iproute2 util-linux hostname)"
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    caps = int(status.get("CapEff", "0").strip(), 16)
    for bit, cap in ((21, "CAP_SYS_ADMIN"), (12, "CAP_NET_ADMIN")):
        if not caps >> bit & 1:
            return f"no {cap} (a container without --privileged?)"
    try:
        os.close(os.pidfd_open(os.getpid()))  # teardown signals through pidfds
    except (AttributeError, OSError) as exc:
        return f"no pidfd_open (needs Python >= 3.9 and Linux >= 5.3): {exc}"
    probe = subprocess.run(
        [_need("unshare"), "--net", "--uts", "--mount", "--", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"`unshare --net --uts --mount` fails here: {probe.stderr.strip()}"
    return None


def _subnet_prefix_for(cluster_id: str) -> str:
    n = zlib.crc32(cluster_id.encode()) % (254 * 256)
    return f"10.{1 + n // 256}.{n % 256}"


class NetnsCluster:
    """`n_hosts` simulated hosts; see the module's docstring. Use as a context manager:
    teardown always runs, and leaves no namespace, process or file of the cluster behind."""

    def __init__(
        self,
        n_hosts: int,
        job: str = "ma-job",
        task: str = "worker",
        subnet_prefix: str | None = None,
        *,
        workdir: Path,
    ) -> None:
        if not 1 <= n_hosts <= _MAX_HOSTS:
            raise ValueError(f"n_hosts={n_hosts!r}: expected 1 to {_MAX_HOSTS}")
        pid = os.getpid()
        self.id = f"{pid}_{_base36(_start_time(pid) or 0)}_{next(_SEQUENCE)}"
        self.n_hosts = n_hosts
        self.job = job
        self.task = task
        self.prefix = subnet_prefix or _subnet_prefix_for(self.id)
        try:
            net = ipaddress.IPv4Network(f"{self.prefix}.0/24")
        except ValueError:
            raise ValueError(
                f"subnet_prefix={subnet_prefix!r}: expected three octets such as '10.77.0'"
            ) from None
        self.subnet = str(net)
        self.gateway = f"{self.prefix}.1"
        self.dir = Path(workdir) / f"{NAME_PREFIX}{self.id}"
        self.switch = f"{NAME_PREFIX}{self.id}_sw"
        self._names = [self.switch, *(self.netns(i) for i in range(n_hosts))]
        self._netns: dict[str, NsId] = {}
        self._netns_fds: list[int] = []  # held open: the namespaces' identities cannot be reused
        self._anchors: list[subprocess.Popen[bytes]] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._started = False
        self._done = False

    # -- names ------------------------------------------------------------------------------
    def name(self, i: int) -> str:
        """Host i's host name, as the platform names pod i."""
        self._check(i)
        return f"{self.job}-{self.task}-{i}"

    def fqdn(self, i: int) -> str:
        return f"{self.name(i)}.{self.job}"

    def address(self, i: int) -> str:
        self._check(i)
        return f"{self.prefix}.{10 + i}"

    def netns(self, i: int) -> str:
        self._check(i)
        return f"{NAME_PREFIX}{self.id}_h{i}"

    def host_dir(self, i: int) -> Path:
        """A scratch directory for host i (sshd config, TMPDIR, logs), removed by teardown."""
        self._check(i)
        return self.dir / f"h{i}"

    @property
    def hosts_file(self) -> Path:
        """The file every host sees as /etc/hosts."""
        return self.dir / "hosts"

    def _check(self, i: int) -> None:
        if not 0 <= i < self.n_hosts:
            raise IndexError(f"host {i!r}: expected 0 to {self.n_hosts - 1}")

    # -- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> NetnsCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.teardown()

    def start(self) -> NetnsCluster:
        if self._started:
            raise RuntimeError(f"cluster {self.id} was started already")
        reason = available()
        if reason is not None:
            raise RuntimeError(f"cannot build a network-namespace cluster here: {reason}")
        self._started = True
        cleanup_stale()
        try:
            self._write_files()
            self._build_network()
            self._start_anchors()
        except BaseException:
            self.teardown()
            raise
        return self

    def _write_files(self) -> None:
        for i in range(self.n_hosts):
            (self.host_dir(i) / "tmp").mkdir(parents=True)
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{self.address(i)}\t{self.fqdn(i)}\t{self.name(i)}" for i in range(self.n_hosts)]
        self.hosts_file.write_text("\n".join(lines) + "\n")
        (self.dir / "resolv.conf").write_text(_RESOLV_CONF)

    def _build_network(self) -> None:
        _ip_batch(None, [f"netns add {n}" for n in self._names])
        for name in self._names:
            fd = os.open(f"{_NETNS_DIR}/{name}", os.O_RDONLY | os.O_CLOEXEC)
            self._netns_fds.append(fd)
            st = os.fstat(fd)
            self._netns[name] = (st.st_dev, st.st_ino)
        switch = [
            "link set lo up",
            "link add br0 type bridge",
            f"addr add {self.gateway}/24 dev br0",
            "link set br0 up",
        ]
        for i in range(self.n_hosts):
            # Created inside the namespaces: no interface ever shows in the root namespace.
            switch += [
                f"link add p{i} type veth peer name eth0 netns {self.netns(i)}",
                f"link set p{i} master br0",
                f"link set p{i} up",
            ]
        _ip_batch(self.switch, switch)
        for i in range(self.n_hosts):
            _ip_batch(
                self.netns(i),
                [
                    "link set lo up",
                    f"addr add {self.address(i)}/24 dev eth0",
                    "link set eth0 up",
                    f"route add default via {self.gateway} dev eth0",
                ],
            )

    def _start_anchors(self) -> None:
        ip, unshare = _need("ip"), _need("unshare")
        for i in range(self.n_hosts):
            self._anchors.append(
                subprocess.Popen(
                    [
                        *(ip, "netns", "exec", self.netns(i), unshare, "--uts", "--mount", "--"),
                        *("/bin/sh", "-c", _HOST_SETUP, "sh", self.name(i)),
                        *(str(self.hosts_file), str(self.dir / "resolv.conf")),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env={"PATH": _SYSTEM_PATH, "LC_ALL": "C"},
                    start_new_session=True,
                )
            )
        for i, anchor in enumerate(self._anchors):
            assert anchor.stdout is not None and anchor.stderr is not None
            if anchor.stdout.readline() != b"ready\n":
                anchor.wait()
                err = anchor.stderr.read().decode(errors="replace").strip()
                raise RuntimeError(f"host {i} ({self.netns(i)}) could not be set up: {err}")
            anchor.stdout.close()
            anchor.stderr.close()

    def teardown(self, grace: float = 0.5) -> None:
        """End every process of the cluster (SIGTERM, up to `grace` s, then SIGKILL), delete its
        namespaces and its directory. Idempotent. Raises if a process survived SIGKILL; the
        namespaces then stay pinned so `pids()` still shows it."""
        if self._done:
            return
        for anchor in self._anchors:
            if anchor.stdin is not None and not anchor.stdin.closed:
                anchor.stdin.close()  # the anchor's `cat` ends
        netns = set(self._netns.values())
        survivors = _end_processes(netns, grace) if netns else []
        for proc in [*self._anchors, *self._procs]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0 if survivors else 1)
        if self._started:
            existing = set(_netns_names())
            gone = [n for n in self._names if n in existing]
            if gone:
                _ip_batch(None, [f"netns del {n}" for n in gone], force=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        if survivors:
            raise RuntimeError(f"cluster {self.id}: processes {survivors} survived SIGKILL")
        for fd in self._netns_fds:
            os.close(fd)
        self._netns_fds.clear()
        self._netns.clear()
        self._done = True

    # -- running things on a host -----------------------------------------------------------
    def popen(
        self,
        i: int,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        pid1: bool = False,
        cwd: str | os.PathLike[str] | None = None,
        **kw: Any,
    ) -> subprocess.Popen[Any]:
        """Start `argv` on host i with exactly `env`, in `cwd` (default: ours). `kw` goes to
        Popen (stdout, stderr, text, ...). The process leads a new session and process group,
        so `os.killpg(proc.pid, sig)` reaches it and what it starts in that group. Without
        `pid1`, `proc.pid` is the command itself. With `pid1`, the command is PID 1 of a new
        PID namespace (as a container's entrypoint): `proc` is the `unshare` waiting on it,
        which ignores SIGTERM/SIGINT and exits with its status; like any PID 1, the command
        gets only the signals it has a handler for, and when it ends every process in its
        PID namespace ends too."""
        workdir = os.fspath(cwd) if cwd is not None else os.getcwd()
        kw["start_new_session"] = True
        command = self.command(i, argv, pid1=pid1, cwd=workdir)
        proc = subprocess.Popen(command, env=dict(env), cwd=workdir, **kw)
        self._procs.append(proc)
        return proc

    def command(
        self,
        i: int,
        argv: Sequence[str],
        *,
        pid1: bool = False,
        cwd: str | os.PathLike[str] | None = None,
    ) -> list[str]:
        """The argv that runs `argv` on host i (what `popen` starts), for a caller that starts
        processes itself; it must start it in a session of its own, as `popen` does."""
        if not self._started or self._done:
            raise RuntimeError(f"cluster {self.id} is not running")
        self._check(i)
        if not argv:
            raise ValueError("argv: expected a command")
        anchor = self._anchors[i]
        if anchor.poll() is not None:
            raise RuntimeError(f"host {i}: its namespaces are gone (anchor ended)")
        workdir = os.fspath(cwd) if cwd is not None else os.getcwd()
        cmd = [_need("nsenter"), f"--target={anchor.pid}", "--net", "--uts", "--mount"]
        # Entering a mount namespace resets the working directory to its root.
        cmd += [f"--wd={workdir}", "--"]
        if pid1:
            cmd += [_need("unshare"), "--pid", "--fork", "--mount-proc", "--kill-child", "--"]
        return [*cmd, *argv]

    def run(
        self,
        i: int,
        argv: Sequence[str],
        env: Mapping[str, str],
        timeout: float,
        *,
        pid1: bool = False,
        cwd: str | os.PathLike[str] | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` on host i to the end, output captured as text. On time-out its process
        group is killed and TimeoutExpired raised."""
        proc = self.popen(
            i,
            argv,
            env,
            pid1=pid1,
            cwd=cwd,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # not yet reaped: the group id is still ours
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
