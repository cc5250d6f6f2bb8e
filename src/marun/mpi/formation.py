"""Cluster formation on node 0: every host resolved and every peer's sshd answering, all hosts
at once, within one time-out.

Each check of a host is one attempt: its name resolved to an IPv4 address (DNS for a pod's name
can appear after the pod starts: Volcano #1972, #452), then, for a peer, its sshd port connected
to and its SSH identification line read (`SSH-2.0-...`: the sshd is up and speaking SSH on that
address), then, for the first `LOGINS` peers to answer (every peer of a job that small), an ssh
login running `true` with exactly the ssh options mpirun will use. The host running the
formation is only resolved (mpirun starts its ranks without ssh).

Why not a login to every peer: a login costs node 0 and the peer about 50 ms of CPU (the key
exchange), an identification line about 3 ms, and mpirun logs in to every peer right after
anyway. What a login proves beyond the identification line (the job's key, the options, the
user's shell) is the same on every node, because every node's sshd is configured by the same
marun from the same key: the sampled logins catch it, with the reason, before mpirun starts.
A peer whose own login would still fail (a broken image on one node only) is named by mpirun's
ssh message instead; docs/mpi.md says so.

Attempts run on a bounded pool of threads, taken in the order they fall due; a host whose attempt
failed is due again after a jittered exponential backoff of at most `MAX_BACKOFF`. So with 1,000
peers none waits behind hosts that are not ready yet, no more threads run than the pool holds,
and a peer is seen within half a second of becoming ready. A line `k/N hosts ready` is printed
while hosts come in; when the time-out passes, every host not ready is named with the last reason
it was not: no DNS answer, port closed or unreachable, no SSH answer, auth refused, ssh failed.

run_mpi.sh resolved one host at a time with a `sleep 1` each (17 minutes for 1,000 hosts) and
waited forever; here the wait is as long as the slowest host, and bounded.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from marun.errors import MarunError
from marun.inputs.hosts import lookup_ipv4

MAX_THREADS = 128  # attempts at once; the hosts due after them queue
FIRST_BACKOFF = 0.1  # seconds before the second attempt at a host; doubling, jittered
MAX_BACKOFF = 0.5  # and never more: a peer is seen soon after it becomes ready
BACKOFF_DOUBLINGS = 16  # past MAX_BACKOFF long before this; bounds the power (retry_ceiling)
SSH_AT_ONCE = 32  # ssh logins at once: each costs node 0 a handshake's CPU
LOGINS = 8  # peers logged in to (the first to answer); every peer of a smaller job
IDENT_LIMIT = 8192  # bytes read for the identification line (RFC 4253 allows lines before it)
PROBE_IDENT = b"SSH-2.0-marun_formation_probe\r\n"  # what sshd logs as the client's version
CONNECT_TIMEOUT = 2.0
SSH_TIMEOUT = 30.0
TICK = 0.2  # how often the waiting thread looks at the clock and the stop event
PROGRESS_EVERY = 1.0  # at most one progress line a second while hosts come in
REMIND_EVERY = 10.0  # and one every 10 s while nothing changes
SHOWN_WAITING = 3  # hosts named in a progress line

Resolver = Callable[[str], str]
Reporter = Callable[[str], None]


class NotReady(Exception):
    """One check of one host failed; the message says why, in the words the user will see."""


class OutOfTime(NotReady):
    """A check cut short by the time-out: an earlier attempt's reason says more, when there is
    one."""


class FormationError(MarunError):
    """The cluster did not form: some host was not ready in time, or formation was stopped."""

    def __init__(self, message: str, interrupted: bool = False) -> None:
        super().__init__(message)
        self.interrupted = interrupted


@dataclass
class HostCheck:
    index: int
    name: str
    address: str | None = None
    ready: bool = False
    problem: str = "not checked yet"
    tried: bool = False  # a check has failed at least once: `problem` is its reason
    login: bool = False  # one of the peers logged in to (kept once given)

    def label(self) -> str:
        where = f" ({self.address})" if self.address and self.address != self.name else ""
        return f"node {self.index} {self.name}{where}"


def resolve_ipv4_once(name: str) -> str:
    """One lookup of `name`'s IPv4 address; NotReady when there is none (yet)."""
    try:
        return lookup_ipv4(name)
    except OSError as exc:
        raise NotReady(f"no DNS answer ({exc.strerror or exc})") from None


def _connect(address: str, port: int, timeout: float) -> socket.socket:
    """A connection to `address:port`; NotReady says how it failed."""
    try:
        return socket.create_connection((address, port), timeout=timeout)
    except ConnectionRefusedError:
        raise NotReady(f"port {port} closed (connection refused)") from None
    except socket.timeout:
        raise NotReady(f"port {port} unreachable (no answer within {timeout:.3g}s)") from None
    except OSError as exc:
        raise NotReady(f"port {port} unreachable ({exc.strerror or exc})") from None


def retry_ceiling(failures: int) -> float:
    """The most seconds to wait before the next attempt at a host that failed `failures` times:
    FIRST_BACKOFF doubling, capped at MAX_BACKOFF. The exponent is capped before the power is
    taken: a host that never resolves fails thousands of times within formation_timeout, and
    2.0 ** 1024 does not fit in a float (OverflowError ended node 0 after about 4 minutes)."""
    doublings = min(max(failures - 1, 0), BACKOFF_DOUBLINGS)
    return min(MAX_BACKOFF, FIRST_BACKOFF * 2.0**doublings)


def probe_port(address: str, port: int, timeout: float) -> None:
    """Connect to `address:port` and hang up; NotReady says how it failed."""
    _connect(address, port, timeout).close()


def probe_ssh(address: str, port: int, timeout: float) -> str:
    """Connect to `address:port` and read the server's SSH identification line (RFC 4253 4.2);
    that line, or NotReady saying what answered instead. Our own line is sent first so that
    sshd logs a client that went away, not a broken one."""
    sock = _connect(address, port, timeout)
    received = b""
    try:
        with sock:
            sock.sendall(PROBE_IDENT)
            while len(received) < IDENT_LIMIT:
                for line in received.split(b"\n")[:-1]:
                    if line.startswith(b"SSH-"):
                        return line.rstrip(b"\r").decode("ascii", "replace")
                data = sock.recv(IDENT_LIMIT - len(received))
                if not data:
                    break
                received += data
    except socket.timeout:
        raise NotReady(
            f"port {port} answers, but no SSH identification within {timeout:.3g}s"
        ) from None
    except OSError as exc:
        raise NotReady(
            f"port {port} answers, but the connection failed ({exc.strerror or exc})"
        ) from None
    if not received:
        # sshd drops a connection when MaxStartups is reached, or as it stops: try again.
        raise NotReady(f"port {port} closed the connection before sending its SSH identification")
    first = received.split(b"\n")[0][:60].decode("ascii", "replace").strip()
    raise NotReady(f"port {port} answers, but not with SSH ({first!r})")


def ssh_problem(returncode: int, stderr: str, port: int) -> str:
    """Why an ssh login failed, from ssh's exit status and messages."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else "no message"
    text = stderr.lower()
    if "permission denied" in text:
        return f"auth refused ({last})"
    if "connection refused" in text:
        return f"port {port} closed (connection refused)"
    if "host key verification failed" in text:
        return f"host key verification failed ({last})"
    return f"ssh login failed (exit {returncode}: {last})"


class Formation:
    """Check `hosts` (index i = node i) until all are ready or `timeout` seconds have passed.

    `ssh_command` is the ssh client argv up to the host (`ssh -p PORT -i KEY -o ...`), None to
    check the port only. `local` is the index of the host running the formation (resolved only;
    None checks every host). `stop` ends the wait early (a signal), as a failure.
    """

    def __init__(
        self,
        hosts: Sequence[str],
        port: int,
        ssh_command: Sequence[str] | None,
        timeout: float,
        *,
        local: int | None = 0,
        resolve: Resolver = resolve_ipv4_once,
        report: Reporter | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.checks = [HostCheck(i, name) for i, name in enumerate(hosts)]
        self._port = port
        self._ssh = list(ssh_command) if ssh_command is not None else None
        self._timeout = timeout
        self._local = local
        self._resolve = resolve
        self._report = report or (lambda line: None)
        self._stop = stop or threading.Event()
        self._halt = threading.Event()  # tells the checking threads to give up
        self._ssh_at_once = threading.BoundedSemaphore(SSH_AT_ONCE)
        self._logins_left = LOGINS  # login slots not yet given to a peer
        self._lock = threading.Lock()
        self._deadline = 0.0

    # -- the waiting thread -----------------------------------------------------------------

    def run(self) -> list[str]:
        """Every host's IPv4 address, in host order; FormationError when not all are ready."""
        started = time.monotonic()
        self._deadline = started + self._timeout
        total = len(self.checks)
        try:
            self._attempt_until_ready(started)
        finally:
            self._halt.set()
        elapsed = time.monotonic() - started
        if self._stop.is_set() and self.ready_count() < total:
            raise FormationError(
                f"cluster formation stopped after {elapsed:.1f}s with "
                f"{self.ready_count()}/{total} hosts ready",
                interrupted=True,
            )
        missing = self.missing()
        if missing:
            lines = [
                f"cluster formation failed: {len(missing)} of {total} hosts not ready within "
                f"formation_timeout={self._timeout:g}s:"
            ]
            lines += [f"  {check.label()}: {check.problem}" for check in missing]
            raise FormationError("\n".join(lines))
        addresses = [check.address or "" for check in self.checks]
        self._refuse_shared_addresses(addresses)
        self._report(f"cluster formation: {total}/{total} hosts ready in {elapsed:.1f}s")
        return addresses

    def _attempt_until_ready(self, started: float) -> None:
        """Hand out attempts as they fall due until every host is ready, the time is up or
        `stop` is set."""
        import heapq
        import random
        from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

        total = len(self.checks)
        workers = max(1, min(total, MAX_THREADS))
        due = [(started, index) for index in range(total)]  # a heap of (when, host)
        failures = [0] * total
        running: dict[Future[bool | None], int] = {}
        left = total
        shown, shown_at = -1, started
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="marun-formation")
        try:
            while left and not self._stop.is_set():
                now = time.monotonic()
                if now >= self._deadline:
                    break
                while due and due[0][0] <= now and len(running) < workers:
                    _, index = heapq.heappop(due)
                    running[pool.submit(self._attempt, self.checks[index])] = index
                wake = min(TICK, self._deadline - now)
                if due and len(running) < workers:
                    wake = min(wake, due[0][0] - now)
                if running:
                    done, _ = wait(running, timeout=max(0.0, wake), return_when=FIRST_COMPLETED)
                else:
                    done = set()
                    self._stop.wait(max(0.0, wake))
                for future in done:
                    index = running.pop(future)
                    outcome = future.result()
                    if outcome is not False:  # ready, or given up on (its problem says why)
                        left -= 1
                    else:
                        failures[index] += 1
                        ceiling = retry_ceiling(failures[index])
                        when = time.monotonic() + random.uniform(0.0, ceiling)
                        heapq.heappush(due, (when, index))
                ready = self.ready_count()
                now = time.monotonic()
                if left and (
                    (ready != shown and now - shown_at >= PROGRESS_EVERY)
                    or now - shown_at >= REMIND_EVERY
                ):
                    self._report(self.progress())
                    shown, shown_at = ready, now
        finally:
            self._halt.set()
            pool.shutdown(wait=False, cancel_futures=True)

    def ready_count(self) -> int:
        with self._lock:
            return sum(check.ready for check in self.checks)

    def missing(self) -> list[HostCheck]:
        with self._lock:
            return [check for check in self.checks if not check.ready]

    def progress(self) -> str:
        missing = self.missing()
        total = len(self.checks)
        line = f"cluster formation: {total - len(missing)}/{total} hosts ready"
        if missing:
            named = [f"{c.label()}: {c.problem}" for c in missing[:SHOWN_WAITING]]
            more = len(missing) - SHOWN_WAITING
            line += "; waiting for " + "; ".join(named) + (f"; and {more} more" if more > 0 else "")
        return line

    def _refuse_shared_addresses(self, addresses: Sequence[str]) -> None:
        seen: dict[str, int] = {}
        for index, address in enumerate(addresses):
            if address in seen:
                first = self.checks[seen[address]]
                raise FormationError(
                    f"cluster formation failed: {first.label()} and "
                    f"{self.checks[index].label()} are the same address: expected one address "
                    "per node (check VC_<TASK>_HOSTS or the hosts' DNS records)"
                )
            seen[address] = index

    # -- the checking threads ---------------------------------------------------------------

    def _attempt(self, check: HostCheck) -> bool | None:
        """One check of one host: True when ready, False to try again, None to give up."""
        try:
            self._check(check)
        except NotReady:
            return False
        except Exception as exc:  # a bug or an odd resolver: this host's problem, not everyone's
            with self._lock:
                check.problem = f"check failed: {exc!r}"
            return None
        return True

    def _over(self) -> bool:
        return self._halt.is_set() or time.monotonic() >= self._deadline

    def _check(self, check: HostCheck) -> None:
        try:
            if check.address is None:
                address = self._resolve(check.name)
                with self._lock:
                    check.address = address
            assert check.address is not None
            if check.index != self._local:
                if self._ssh is None:
                    self._probe(probe_port, check.address)
                else:
                    self._probe(probe_ssh, check.address)
                    if self._takes_login(check):
                        with self._ssh_at_once:
                            self._ssh_login(check.address)
        except NotReady as exc:
            with self._lock:
                if not (isinstance(exc, OutOfTime) and check.tried):
                    check.problem = str(exc)
                check.tried = True
            raise
        with self._lock:
            check.ready = True
            check.problem = "ready"

    def _takes_login(self, check: HostCheck) -> bool:
        with self._lock:
            if not check.login and self._logins_left > 0:
                check.login = True
                self._logins_left -= 1
            return check.login

    def _probe(self, probe: Callable[[str, int, float], object], address: str) -> None:
        limit = self._attempt_timeout(CONNECT_TIMEOUT)
        try:
            probe(address, self._port, limit)
        except NotReady as exc:
            if limit < CONNECT_TIMEOUT and self._over():
                raise OutOfTime(str(exc)) from None
            raise

    def _attempt_timeout(self, cap: float) -> float:
        return max(0.1, min(cap, self._deadline - time.monotonic()))

    def _ssh_login(self, address: str) -> None:
        assert self._ssh is not None
        if self._over():
            raise OutOfTime("ssh login not tried before the time-out")
        limit = self._attempt_timeout(SSH_TIMEOUT)
        try:
            proc = subprocess.Popen(
                [*self._ssh, address, "true"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            raise NotReady(f"ssh could not start ({exc.strerror})") from None
        ends = time.monotonic() + limit
        while True:
            try:
                _, err = proc.communicate(timeout=TICK)
                break
            except subprocess.TimeoutExpired:
                if self._halt.is_set() or time.monotonic() >= ends:
                    proc.kill()
                    proc.communicate()
                    cut = OutOfTime if self._over() else NotReady
                    raise cut(f"ssh login did not finish within {limit:.3g}s") from None
        if proc.returncode != 0:
            raise NotReady(ssh_problem(proc.returncode, err or "", self._port))
