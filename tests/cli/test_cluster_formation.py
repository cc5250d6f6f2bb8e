"""Cluster formation (marun.mpi.formation) against real listeners on loopback addresses
(127.0.0.2, 127.0.0.3, ...: one "host" each, all on the same port, as every node's sshd is),
real name resolution, and a real sshd for the login step.

Two tests replace the resolver with a function of their own, because what they check cannot be
seen through the system's: that every name is looked up at once (the resolver waits at a barrier
that opens only when all lookups are in flight together) and that a lookup failing twice is
retried. Nothing here asserts on elapsed time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from marun.mpi.formation import Formation, FormationError, NotReady, ssh_problem


@pytest.fixture
def port() -> int:
    """A port free on 127.0.0.2 and 127.0.0.3 (the tests' hosts) right now."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
            candidate = int(probe.getsockname()[1])
        try:
            with socket.socket() as other:
                other.bind(("127.0.0.3", candidate))
        except OSError:
            continue
        return candidate
    raise RuntimeError("no common free port on 127.0.0.2 and 127.0.0.3")


class Listeners:
    """Listening sockets standing in for the hosts' sshd ports (the kernel completes each
    connection from its backlog; nothing needs to accept)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._socks: list[socket.socket] = []

    def open(self, address: str) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, self.port))
        sock.listen(64)
        self._socks.append(sock)

    def close(self) -> None:
        for sock in self._socks:
            sock.close()


@pytest.fixture
def listeners(port: int) -> Iterator[Listeners]:
    made = Listeners(port)
    yield made
    made.close()


def test_every_host_ready_gives_the_addresses_in_host_order(listeners: Listeners) -> None:
    for address in ("127.0.0.2", "127.0.0.3"):
        listeners.open(address)
    lines: list[str] = []
    formation = Formation(
        ["localhost", "127.0.0.2", "127.0.0.3"], listeners.port, None, 30, report=lines.append
    )
    assert formation.run() == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert lines[-1].startswith("cluster formation: 3/3 hosts ready in ")


def test_names_each_missing_host_and_why(listeners: Listeners) -> None:
    listeners.open("127.0.0.2")
    hosts = ["localhost", "127.0.0.2", "127.0.0.3", "no-such-host.invalid"]
    with pytest.raises(FormationError) as info:
        Formation(hosts, listeners.port, None, 1.0).run()
    lines = str(info.value).splitlines()
    assert lines[0] == (
        "cluster formation failed: 2 of 4 hosts not ready within formation_timeout=1s:"
    )
    assert lines[1] == f"  node 2 127.0.0.3: port {listeners.port} closed (connection refused)"
    assert lines[2].startswith("  node 3 no-such-host.invalid: no DNS answer (")
    assert len(lines) == 3
    assert not info.value.interrupted


def test_waits_for_a_late_host_and_shows_progress(listeners: Listeners) -> None:
    """Host 1's port opens only once the formation has said it is waiting for it."""
    lines: list[str] = []

    def report(line: str) -> None:
        lines.append(line)
        if "waiting for" in line and len(lines) == 1:
            listeners.open("127.0.0.2")

    formation = Formation(["localhost", "127.0.0.2"], listeners.port, None, 60, report=report)
    assert formation.run() == ["127.0.0.1", "127.0.0.2"]
    assert lines[0] == (
        "cluster formation: 1/2 hosts ready; waiting for node 1 127.0.0.2: "
        f"port {listeners.port} closed (connection refused)"
    )
    assert lines[-1].startswith("cluster formation: 2/2 hosts ready in ")


def test_resolves_every_name_at_once(listeners: Listeners) -> None:
    """Each lookup waits until all of them are in flight: they only pass if done in parallel."""
    count = 8
    names = [f"host-{i}.job" for i in range(count)]
    addresses = {name: f"127.0.0.{10 + i}" for i, name in enumerate(names)}
    for address in addresses.values():
        listeners.open(address)
    barrier = threading.Barrier(count, timeout=20)
    looked_up: list[str] = []

    def resolve(name: str) -> str:
        looked_up.append(name)
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            raise NotReady("not every lookup was in flight at once") from None
        return addresses[name]

    formation = Formation(names, listeners.port, None, 30, local=None, resolve=resolve)
    assert formation.run() == [addresses[n] for n in names]
    assert sorted(looked_up) == sorted(names)


def test_retries_a_failing_lookup(listeners: Listeners) -> None:
    """DNS for a pod's name may appear only after the pod starts: a lookup is retried."""
    listeners.open("127.0.0.2")
    calls: list[str] = []

    def resolve(name: str) -> str:
        calls.append(name)
        if name == "late.job" and calls.count(name) <= 2:
            raise NotReady("no DNS answer (not yet)")
        return "127.0.0.1" if name == "me.job" else "127.0.0.2"

    formation = Formation(["me.job", "late.job"], listeners.port, None, 30, resolve=resolve)
    assert formation.run() == ["127.0.0.1", "127.0.0.2"]
    assert calls.count("late.job") == 3


def test_two_hosts_at_one_address_is_a_failure(listeners: Listeners) -> None:
    listeners.open("127.0.0.2")
    with pytest.raises(FormationError, match="are the same address"):
        Formation(["localhost", "127.0.0.2", "127.0.0.2"], listeners.port, None, 30).run()


def test_stop_event_ends_the_wait(listeners: Listeners) -> None:
    """A signal on node 0 (the event) ends formation as interrupted; the hosts it waits for
    never come."""
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    try:
        with pytest.raises(FormationError) as info:
            Formation(["localhost", "127.0.0.3"], listeners.port, None, 600, stop=stop).run()
    finally:
        timer.cancel()
    assert info.value.interrupted
    assert "cluster formation stopped after" in str(info.value)


SSH_FAILURES = [
    pytest.param(
        255,
        "root@10.0.0.2: Permission denied (publickey).\n",
        "auth refused (root@10.0.0.2: Permission denied (publickey).)",
        id="auth",
    ),
    pytest.param(
        255,
        "ssh: connect to host 10.0.0.2 port 36666: Connection refused\n",
        "port 36666 closed (connection refused)",
        id="refused",
    ),
    pytest.param(
        255,
        "Host key verification failed.\n",
        "host key verification failed (Host key verification failed.)",
        id="host-key",
    ),
    pytest.param(
        1,
        "bash: true: command not found\n",
        "ssh login failed (exit 1: bash: true: command",
        id="other",
    ),
]


@pytest.mark.parametrize(("code", "stderr", "expected"), SSH_FAILURES)
def test_ssh_problem(code: int, stderr: str, expected: str) -> None:
    assert ssh_problem(code, stderr, 36666).startswith(expected)


# -- the login step, with a real sshd -------------------------------------------------------------


@pytest.fixture
def sshd_on_127_0_0_2(tmp_path: Path, port: int) -> Iterator[tuple[int, Path]]:
    """marun's own sshd config, listening on 127.0.0.2, letting in the key `tmp_path/good`.
    As root, sshd runs in a private mount namespace with a /run/sshd of its own."""
    import pwd

    from marun.mpi.sshd_config import render_sshd_config

    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd):
        pytest.skip("openssh-server is not installed")
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    for name in ("host", "good", "bad"):
        subprocess.run([*keygen, "-f", str(tmp_path / name)], check=True)
    config = tmp_path / "sshd_config"
    config.write_text(
        render_sshd_config(
            port=port,
            host_key=str(tmp_path / "host"),
            pid_file=str(tmp_path / "sshd.pid"),
            authorized_keys=(str(tmp_path / "good.pub"),),
            hosts=2,
            user=pwd.getpwuid(os.getuid()).pw_name,
            listen_address="127.0.0.2",
        )
    )
    cmd = [sshd, "-D", "-e", "-f", str(config)]
    if os.getuid() == 0:
        script = 'mount -t tmpfs -o mode=755 marun-test-run /run && mkdir /run/sshd && exec "$@"'
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *cmd]
    log = (tmp_path / "sshd.log").open("w")
    proc = subprocess.Popen(cmd, stderr=log)
    try:
        for _ in range(200):
            if proc.poll() is not None:
                break
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.2", port)) == 0:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, (tmp_path / "sshd.log").read_text()
        yield port, tmp_path
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _ssh(port: int, key: Path) -> list[str]:
    """The ssh client as mpirun runs it (the plan's plm_rsh_args)."""
    return [
        *("ssh", "-p", str(port), "-i", str(key), "-o", "IdentitiesOnly=yes"),
        *("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"),
        *("-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"),
    ]


@pytest.mark.e2e
def test_login_step_with_a_real_sshd(sshd_on_127_0_0_2: tuple[int, Path]) -> None:
    port, keys = sshd_on_127_0_0_2
    hosts = ["localhost", "127.0.0.2"]
    assert Formation(hosts, port, _ssh(port, keys / "good"), 60).run() == ["127.0.0.1", "127.0.0.2"]
    with pytest.raises(FormationError) as info:
        Formation(hosts, port, _ssh(port, keys / "bad"), 3.0).run()
    assert "node 1 127.0.0.2: auth refused (" in str(info.value)
    assert "Permission denied (publickey)" in str(info.value)


def test_hosts_not_ready_hold_up_no_one(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """More hosts than threads, the first ones not ready for a long while: the others are all
    checked and ready meanwhile (no host waits behind another), on no more threads than the
    pool holds."""
    from marun.mpi import formation as module

    monkeypatch.setattr(module, "MAX_THREADS", 8)
    total, late = 120, range(1, 41)  # 40 late hosts: five times the threads
    names = [f"host-{i}" for i in range(total)]
    released = threading.Event()

    def resolve(name: str) -> str:
        i = int(name.split("-")[1])
        if i in late and not released.is_set():
            raise NotReady("no DNS answer (not yet)")
        return f"127.1.{i // 250}.{i % 250 + 1}"

    def formation_threads() -> int:
        return sum(t.name.startswith("marun-formation") for t in threading.enumerate())

    before = formation_threads()  # an earlier test's pool may still be winding down
    threads_seen: list[int] = []

    def watch() -> None:
        while formation.ready_count() < total - len(late):
            threads_seen.append(formation_threads() - before)
            time.sleep(0.01)
        released.set()

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", port))
        server.listen(256)
        formation = Formation(names, port, None, 20, resolve=resolve)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        addresses = formation.run()
    assert released.is_set()  # every host but the late ones was ready while they were not
    assert max(threads_seen) <= 8
    assert addresses[1] == "127.1.0.2" and len(set(addresses)) == total


# -- the SSH identification line, and the logins sampled --------------------------------------


class Answering:
    """A server on 127.0.0.2:`port` that answers each connection with `reply` (None: never
    answers) and hangs up; counts the connections and keeps what each client sent first."""

    def __init__(self, port: int, reply: bytes | None) -> None:
        self.reply = reply
        self.received: list[bytes] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.2", port))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1.0)
                if self.reply is None:
                    self._stop.wait(2.0)
                    continue
                conn.sendall(self.reply)
                with contextlib.suppress(OSError):
                    self.received.append(conn.recv(256))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        pytest.param(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", None, id="sshd"),
        pytest.param(b"a greeting first\r\nSSH-2.0-OpenSSH_9.2p1\r\n", None, id="lines-before"),
        pytest.param(b"HTTP/1.1 400 Bad Request\r\n\r\n", "answers, but not with SSH", id="http"),
        pytest.param(b"", "closed the connection before sending its SSH", id="hang-up"),
        pytest.param(None, "no SSH identification within 0.5s", id="silent"),
    ],
)
def test_probe_ssh_reads_the_identification_line(
    port: int, reply: bytes | None, expected: str | None
) -> None:
    from marun.mpi.formation import PROBE_IDENT, probe_ssh

    server = Answering(port, reply)
    try:
        if expected is None:
            assert probe_ssh("127.0.0.2", port, 0.5).startswith("SSH-2.0-OpenSSH_9.2p1")
        else:
            with pytest.raises(NotReady, match=expected):
                probe_ssh("127.0.0.2", port, 0.5)
    finally:
        server.close()  # after its thread has taken in what the probe sent
    if expected is None:
        assert server.received == [PROBE_IDENT]  # sshd logs a client that said who it is
    with pytest.raises(NotReady, match=f"port {port} closed"):
        probe_ssh("127.0.0.2", port, 0.5)


def test_every_peer_answers_ssh_and_the_first_ones_are_logged_in_to(
    port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 peers (loopback addresses, one listener on all of them answering as sshd does): each
    is asked for its SSH identification; `LOGINS` of them (3 here) get the login, through a
    stand-in ssh that records the host it was given. A peer that is not an sshd is not ready
    however its login would go."""
    import sys

    from marun.mpi import formation as module

    monkeypatch.setattr(module, "LOGINS", 3)
    record = tmp_path / "logins"
    fake_ssh = tmp_path / "ssh.py"
    fake_ssh.write_text(
        f"import sys\nwith open({str(record)!r}, 'a') as fh:\n    fh.write(sys.argv[-2] + '\\n')\n"
    )
    peers = [f"127.1.0.{i}" for i in range(2, 22)]
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", port))
        server.listen(256)
        stop = threading.Event()
        seen: list[str] = []

        def serve() -> None:
            server.settimeout(0.1)
            while not stop.is_set():
                try:
                    conn, _peer = server.accept()
                except OSError:
                    continue
                with conn:
                    seen.append(conn.getsockname()[0])
                    conn.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            formation = Formation(["localhost", *peers], port, [sys.executable, str(fake_ssh)], 30)
            addresses = formation.run()
        finally:
            stop.set()
            thread.join()
    assert addresses == ["127.0.0.1", *peers]
    assert sorted(set(seen)) == sorted(peers)  # every peer was asked, at its own address
    logged_in = record.read_text().split()
    assert len(logged_in) == 3 and set(logged_in) <= set(peers)
    assert sum(check.login for check in formation.checks) == 3
