"""The ring probe: each node's marun connects to the next node's, over the address the
framework will use, and measures the link (docs/preflight.md).

`ProbeListener` is one small TCP listener per node (not per process): a thread that answers
pings and takes bounded chunks of data. `probe_link` is the client: connect time, the least of a
few round trips, and the best rate of a few chunks of `CHUNK` bytes within `DATA_BUDGET` seconds.
Everything is bounded: the connect by `connect_timeout`, the whole probe by about
`connect_timeout + DATA_BUDGET + 1` s, a connection to the listener by `CONN_TIMEOUT` and
`MAX_CONN_BYTES`, the listener's connections at once by `MAX_CONNECTIONS`.

The wire (after TCP connect): the client sends `MARUN-PROBE 1 <tag>\\n` (`tag`: a digest of the
job's id, so that another job's probe is not answered), then any of `p` (answered `p`),
`d` + 4-byte big-endian length + that many bytes (answered `k` once all are read), `q` (bye).
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import struct
import threading
import time

from marun.preflight.result import LinkResult

CONNECT_TIMEOUT = 2.0  # seconds to connect to the next node's listener
PINGS = 5  # round trips; the least counts (a scheduler's stall is not the link's)
CHUNK = 1 << 20  # bytes per timed chunk
CHUNKS = 4  # at most; the best rate counts (the first pays for TCP's slow start)
DATA_BUDGET = 1.0  # seconds for the chunks
CONN_TIMEOUT = 5.0  # seconds the listener waits on one connection's next byte
MAX_CONN_BYTES = 16 << 20  # the listener reads at most this much per connection
MAX_CONNECTIONS = 4  # served at once; more are closed at once
_MAGIC = b"MARUN-PROBE 1 "
_HEADER_MAX = 64


def probe_tag(job: str) -> str:
    return hashlib.sha256(job.encode()).hexdigest()[:16]


def _recv_exact(sock: socket.socket, n: int, sink: bytearray | None = None) -> bytes:
    """Read exactly `n` bytes (into `sink`'s reused buffer when given: the data is dropped)."""
    if sink is not None:
        view, left = memoryview(sink), n
        while left:
            got = sock.recv_into(view[: min(left, len(sink))])
            if not got:
                raise ConnectionError("closed mid-chunk")
            left -= got
        return b""
    data = b""
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            raise ConnectionError("closed")
        data += part
    return data


def _read_line(sock: socket.socket) -> bytes:
    """The header, a byte at a time (a buffered reader would take the first ping with it)."""
    line = b""
    while len(line) < _HEADER_MAX:
        byte = sock.recv(1)
        if byte in (b"", b"\n"):
            break
        line += byte
    return line


class ProbeListener:
    """This node's listener for the ring probe: `start()` binds (`port` 0: any free port) and
    answers in a daemon thread until `close()`. Its port goes to node 0 in the node's report."""

    def __init__(self, job: str, host: str = "0.0.0.0", port: int = 0) -> None:
        self._tag = probe_tag(job).encode()
        self._addr = (host, port)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._closed = threading.Event()
        self.served = 0  # connections that said the right tag

    @property
    def port(self) -> int:
        if self._sock is None:
            raise RuntimeError("the probe listener is not started")
        return int(self._sock.getsockname()[1])

    def start(self) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(self._addr)
            sock.listen(MAX_CONNECTIONS)
        except OSError:
            sock.close()
            raise
        sock.settimeout(0.2)  # so that close() is seen
        self._sock = sock
        self._thread = threading.Thread(target=self._accept, name="preflight-probe", daemon=True)
        self._thread.start()
        return self.port

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(1.0)
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> ProbeListener:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(CONN_TIMEOUT)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if _read_line(conn) != _MAGIC + self._tag:
                    return
                self.served += 1
                self._answer(conn)
        except OSError:
            pass  # a probe that went away: its own side reports it
        finally:
            self._slots.release()

    def _answer(self, conn: socket.socket) -> None:
        sink, taken = bytearray(64 << 10), 0
        while not self._closed.is_set():
            cmd = conn.recv(1)
            if cmd == b"p":
                conn.sendall(b"p")
            elif cmd == b"d":
                (size,) = struct.unpack("!I", _recv_exact(conn, 4))
                taken += size
                if size > CHUNK or taken > MAX_CONN_BYTES:
                    return
                _recv_exact(conn, size, sink)
                conn.sendall(b"k")
            else:  # q, end of file, anything else
                return


def _pings(sock: socket.socket, count: int) -> float:
    best = float("inf")
    for _ in range(count):
        start = time.monotonic()
        sock.sendall(b"p")
        if _recv_exact(sock, 1) != b"p":
            raise ConnectionError("the listener answered something else")
        best = min(best, time.monotonic() - start)
    return best


def _chunks(sock: socket.socket, budget: float, chunk: int, count: int) -> tuple[float, int]:
    """(best rate in bytes/s, bytes sent). A chunk still unanswered when the budget is spent
    gives an upper bound of its rate (the link is at most that fast) and ends the probe."""
    payload = b"d" + struct.pack("!I", chunk) + bytes(chunk)
    deadline = time.monotonic() + budget
    best, sent = 0.0, 0
    for _ in range(count):
        left = deadline - time.monotonic()
        if left <= 0 and sent:
            break
        start = time.monotonic()
        sock.settimeout(max(left, 0.05))
        try:
            sock.sendall(payload)
            if _recv_exact(sock, 1) != b"k":
                raise ConnectionError("the listener answered something else")
        except socket.timeout:
            bound = chunk / (time.monotonic() - start)
            return (best if sent else bound), sent
        sent += chunk
        best = max(best, chunk / max(time.monotonic() - start, 1e-9))
    return best, sent


def probe_link(
    src: tuple[int, str],
    dst: tuple[int, str],
    address: str,
    port: int,
    job: str,
    *,
    connect_timeout: float = CONNECT_TIMEOUT,
    data_budget: float = DATA_BUDGET,
    chunk: int = CHUNK,
    chunks: int = CHUNKS,
) -> LinkResult:
    """Probe the link from node `src` (index, host) to node `dst`'s listener at
    `address`:`port`. Never raises for what the network does: an unreachable listener is a
    result with `error` set."""
    link = LinkResult(src[0], dst[0], src[1], dst[1], address, port)
    start = time.monotonic()
    try:
        sock = socket.create_connection((address, port), timeout=connect_timeout)
    except OSError as exc:
        why = "no answer" if isinstance(exc, socket.timeout) else (exc.strerror or str(exc))
        return _with(link, error=f"cannot connect to {address}:{port} ({why})")
    connect_s = time.monotonic() - start
    with sock:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(connect_timeout)
            sock.sendall(_MAGIC + probe_tag(job).encode() + b"\n")
            rtt = _pings(sock, PINGS)
        except OSError as exc:
            why = "no answer" if isinstance(exc, socket.timeout) else (exc.strerror or str(exc))
            return _with(link, connect_s=connect_s, error=f"{address}:{port} connected but {why}")
        try:
            rate, sent = _chunks(sock, data_budget, chunk, chunks)
        except OSError:
            rate, sent = 0.0, 0  # connected and answering: the rate is unknown, not the link
        with contextlib.suppress(OSError):
            sock.sendall(b"q")
    return _with(link, connect_s=connect_s, rtt_s=rtt, throughput=rate or None, bytes=sent)


def _with(link: LinkResult, **changes: object) -> LinkResult:
    from dataclasses import replace

    return replace(link, **changes)  # type: ignore[arg-type]
