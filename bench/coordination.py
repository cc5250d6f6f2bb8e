"""The job's coordination at scale (docs/performance.md, "The job's coordination at scale").

Node 0's real Coordinator (marun.job.coordinator) runs in a child process of its own; N x S light
members speak its wire protocol (challenge, signed hello with the member's nonce, signed
heartbeats with sequence numbers, start/stop) from asyncio loops in --procs worker processes (2
by default: one loop's 2 s time-outs were the harness's own bottleneck at 16,384 members), so
the members' cost is not node 0's. A source whose protocol has relays (3, part 24: one
connection per node, marun.job.relay) is met by light nodes: one connection a node carrying its
S slots (their hellos in one `hellos` line from protocol 5, a line each before; their heartbeats
in one `beats` line; node 0's broadcasts once); an older source by one connection per member,
as before. The last node is real: a real Relay and S real
Members (marun.job.member.Member; one real Member of one slot for an older source) in a third
process, whose own CPU is measured too. Everything runs on loopback; node n's members connect
from 127.1.x.y (one address per node, as one pod each). Run sizes of 256 x 8 and more inside a
network namespace of their own (`unshare --net`): their TIME_WAIT sockets stay there.

The job has a secret (MARUN_JOB_TOKEN-style), so every line is HMAC-signed and checked. Node 0's
events go to an events file, as a real marun's do (marun.log; a temporary directory): their
cost is node 0's (from 2026-11-29; before, a no-op log left out a `node_arrived` line per
member: 1.5 s of node 0's arrival at 4,096 x 8). The table counts the file's lines.

A light members' process has at most --connecting (64) of its nodes' connects under way at once,
the others waiting their turn: a process that started all its 2,048 nodes' connects at once read
no challenge until the last of them was done, so every hello reached node 0 0.2-0.5 s after the
last challenge had reached its member, node 0 idle meanwhile; a real node answers its challenge
within its own round trip. The gate is on the connect's own handshake, which the kernel
completes whether node 0 has accepted yet or not: the storm does not wait for node 0.
--connecting 0 is the harness before 2026-11-29 (all at once).

Per size it prints: the time from the last member's connect to every member started (and from the
first connect attempt; and how long the connects took to arrive), connection retries (connect or
challenge not within 2 s, as the real member retries), node 0's CPU seconds during arrival, node
0's CPU share of one core in steady state (over --steady seconds), the stop fan-out (one member
sends a failure: time to the last member's `stop`), node 0's RSS, and the real member's CPU share
in steady state. The start and the stop are timed twice: when the light members' processes read
them, and when they reached the members' sockets (the kernel's arrival time, SO_TIMESTAMPNS): two
processes read for thousands of nodes on the cores node 0 runs on, where each real node reads its
own. Ratios are per member against the first size of the run (1.00 = linear in members). Nothing is
asserted.

BENCH_PROFILE=FILE: node 0's loop is profiled (cProfile, from 3 s to 23 s after the start) into
FILE (the 30 costliest) and FILE.prof (all of it, for pstats). The soft limit on open files is
raised to the hard limit (each side holds one descriptor per member).

    python bench/coordination.py                       # 64x1, 128x8
    python bench/coordination.py --sizes 1024x1,512x8,1024x8 --steady 10
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import math
import multiprocessing
import os
import random
import resource
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, load_note

sys.path.insert(
    0, os.environ.get("MARUN_BENCH_SRC", str(Path(__file__).resolve().parents[1] / "src"))
)
from marun.job.protocol import PROTOCOL, ProtocolError, decode, encode, fresh, new_nonce
from marun.sim.ports import free_port

try:  # the job's heartbeat interval (part 15); a source from before it: one a second
    from marun.job import heartbeat as _heartbeat
except ImportError:
    _heartbeat = None  # type: ignore[assignment]

JOB = "bench-coordination"
TOKEN = "bench-coordination-secret-0123456789"
CONNECT_WAIT = 2.0  # the real member's: create_connection and the challenge within 2 s
RETRY = 0.5  # the real member's pause between tries
WHY: collections.Counter[str] = collections.Counter()  # retries by cause, for the notes

# argv: nodes slots port job peer_timeout beats_per_second (0: marun's own)
PATCH_BEATS = """\
if float(sys.argv[6]) > 0:
    try:
        import marun.job.heartbeat as hb
        hb.BEATS_PER_SECOND = float(sys.argv[6])
    except ImportError:
        pass
"""

NODE0 = (
    """\
import os, sys, time
from marun.job.coordinator import Coordinator
from marun.plan.coordination import Coordination
nodes, slots, port = map(int, sys.argv[1:4])
"""
    + PATCH_BEATS
    + """\
hubs = int(sys.argv[7]) if len(sys.argv) > 7 else 0  # --hubs: nodes per group (0: none)
coord = Coordination(host="127.0.0.1", port=port, nodes=nodes, index=0, job=sys.argv[4],
                     slots=slots, arrival_timeout=600.0, peer_timeout=float(sys.argv[5]),
                     auth="token", **({"hub_group": hubs} if hubs else {}))
if hasattr(Coordinator, "_apply"):  # the job machine's shell: the stop's actions carried out
    from marun.job.actions import Broadcast
    from marun.job.messages import StopJob
    _apply = Coordinator._apply
    def timed_apply(self, actions):  # node 0's own part of the fan-out: every stop signed, sent
        t = time.perf_counter()
        _apply(self, actions)
        # (a check as cheap as can be: it runs on every action of node 0's, 100,000 at arrival)
        if any(type(a) is Broadcast and type(a.message) is StopJob for a in actions):
            print("stop_sent", time.perf_counter() - t, flush=True)
    Coordinator._apply = timed_apply
else:  # before part 18's machine (a baseline's source on PYTHONPATH)
    _stop = Coordinator._stop
    def timed_stop(self, code, failure):
        t = time.perf_counter()
        _stop(self, code, failure)
        print("stop_sent", time.perf_counter() - t, flush=True)
    Coordinator._stop = timed_stop
if os.environ.get("BENCH_PROFILE"):  # node 0's loop profiled 3 s to 23 s after the start
    import cProfile, pstats
    from marun.job.phases import JobPhase
    orig, state = Coordinator._tick, {}
    def _tick(self):  # in the coordinator's thread, where the profile must be enabled
        now = time.monotonic()
        if self.phase is JobPhase.RUNNING:
            state.setdefault("t", now)
            if "p" not in state and now - state["t"] > 3:
                state["p"], state["s"] = cProfile.Profile(), now
                state["p"].enable()
            elif "p" in state and "done" not in state and now - state["s"] > 20:
                state["p"].disable()
                state["done"] = 1
                state["p"].dump_stats(os.environ["BENCH_PROFILE"] + ".prof")  # for pstats
                with open(os.environ["BENCH_PROFILE"], "w") as out:
                    pstats.Stats(state["p"], stream=out).sort_stats("tottime").print_stats(30)
        return orig(self)
    Coordinator._tick = _tick
log = {}
try:  # node 0's events into a file, as a real marun's (marun.job.link): their cost is node 0's
    from marun.log import get_logger, log_to_file
    log_to_file(os.environ["BENCH_EVENTS_DIR"])
    _events = get_logger("marun.job")
    def _log(event, level="info", **fields):
        getattr(_events, level)(event, **fields)
    log = {"log": _log}
except ImportError:  # (a source without them: no log, as before)
    pass
c = Coordinator(coord, os.environ["MARUN_JOB_TOKEN"].encode(), announce=lambda _: None,
                **log).start()
print("ready", flush=True)
sys.stdin.read()
"""
)

REAL_MEMBER = (
    """\
import os, sys, time
try:
    from marun.inputs.records import replace  # the plan's classes are records from b8a2201 on
except ImportError:  # an older tree measured against this one
    from dataclasses import replace
from marun.job.member import Member
from marun.job.protocol import PROTOCOL
from marun.plan.coordination import Coordination
nodes, slots, port = map(int, sys.argv[1:4])
"""
    + PATCH_BEATS
    + """\
coord = Coordination(host="127.0.0.1", port=port, nodes=nodes, index=nodes - 1, job=sys.argv[4],
                     slots=slots, slot=slots - 1, arrival_timeout=600.0,
                     peer_timeout=float(sys.argv[5]), auth="token")
secret = os.environ["MARUN_JOB_TOKEN"].encode()
members = []
if PROTOCOL >= 3 and slots > 1:  # one connection per node: the node's relay and every slot
    from marun.job.relay import Relay
    relay = Relay(replace(coord, slot=0), secret, "127.0.0.1").start()
    members = [Member(replace(coord, slot=s), secret, "127.0.0.1")
               for s in range(slots)]
else:
    members = [Member(coord, secret, "127.0.0.1")]
end = time.monotonic() + 60
while time.monotonic() < end and not all(m.machine.welcomed for m in members):
    time.sleep(0.05)
print("ready" if all(m.machine.welcomed for m in members) else "not connected", flush=True)
sys.stdin.read()
"""
)


def cpu_seconds(pid: int) -> float:
    """CPU seconds of every thread of `pid`, to the nanosecond (schedstat: /proc/PID/stat
    counts clock ticks, too coarse for a member's share)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen queue was full (all of this
    network namespace's listeners: other programs' too)."""
    try:
        with open("/proc/net/netstat") as fh:
            rows = [line.split() for line in fh if line.startswith("TcpExt:")]
        return int(dict(zip(rows[0], rows[1]))["ListenOverflows"])
    except (OSError, IndexError, KeyError, ValueError):
        return -1


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # (Linux's; Python names it from 3.14)


class StampedSocket(socket.socket):
    """A light member's socket that keeps the kernel's wall-clock time of arrival of what it
    read last (SO_TIMESTAMPNS): when a line reached the member, however long this process (one
    of two that play 4,096 nodes on the bench's cores) took to get round to reading it. asyncio's
    transport reads with recv(); the stop's fan-out is measured both ways."""

    arrived = 0.0

    def recv(self, size: int, flags: int = 0) -> bytes:
        data, ancillary, _, _ = self.recvmsg(size, 64, flags)
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", raw[:16])
                self.arrived = sec + nsec / 1e9
        return data


async def connect(
    port: int, source: tuple[str, int]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, StampedSocket]:
    """A connection from `source` to node 0, with no name resolution: open_connection(host,
    local_addr=...) resolves both addresses in asyncio's thread pool (6 threads here), and 8,191
    members queued 16,382 look-ups there, so their 2 s ran out before their connect began."""
    sock = StampedSocket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setblocking(False)
        sock.bind(source)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return (*await asyncio.open_connection(sock=sock), sock)


@dataclass
class Light:
    """One light member: the real member's wire protocol, no supervisor behind it."""

    node: int
    slot: int
    secret: bytes
    every: float = 1.0  # heartbeat interval: the job's (marun.job.heartbeat)
    silent: bool = False  # sends nothing more, keeps its connection (a frozen marun)
    last_sent: float = 0.0  # monotonic
    connected: float = 0.0  # monotonic: this member's last successful connect
    started: float = 0.0
    stopped: float = 0.0
    # wall clock: the kernel's time node 0's challenge, its start and its stop reached the socket
    challenge_arrived: float = 0.0
    start_arrived: float = 0.0
    stop_arrived: float = 0.0
    sock: StampedSocket | None = None
    retries: int = 0
    instance: str = field(default_factory=new_nonce)  # one per (light) marun process
    leader: str = ""  # node 0's instance, from its welcome
    refused: int = 0
    writer: asyncio.StreamWriter | None = None
    peer: str = ""
    mine: str = ""
    seq_out: int = 0
    seq_in: int = -1
    done: asyncio.Event = field(default_factory=asyncio.Event)
    step: int = 0  # --progress: the step its one rank reports with each heartbeat
    progress: ClassVar[bool] = False  # --progress
    at_once: ClassVar[int] = 0  # --connecting: a worker's connects under way at once (0: all)
    gate: ClassVar[asyncio.Semaphore | None] = None  # (made in the worker's own loop)

    def send(self, kind: str, **fields: object) -> None:
        body = {"job": JOB, "node": self.node, "slot": self.slot, "type": kind, **fields}
        body.update(peer=self.peer, seq=self.seq_out)
        self.seq_out += 1
        assert self.writer is not None
        self.writer.write(encode(self.secret, body))
        self.last_sent = time.monotonic()

    async def run(self, port: int, deadline: float) -> None:
        source = (f"127.1.{self.node // 256}.{self.node % 256}", 0)
        while time.monotonic() < deadline:
            try:
                reader, writer, self.sock = await self._connect(port, source)
            except (OSError, asyncio.TimeoutError) as exc:
                self.retries += 1
                WHY[f"connect: {type(exc).__name__}"] += 1
                await asyncio.sleep(RETRY)
                continue
            try:
                line = await asyncio.wait_for(reader.readline(), CONNECT_WAIT)
                challenge = decode(self.secret, JOB, line)
            except (OSError, asyncio.TimeoutError, ProtocolError) as exc:
                self.retries += 1
                WHY[f"challenge: {type(exc).__name__}"] += 1
                writer.close()
                await asyncio.sleep(RETRY)
                continue
            self.connected = time.monotonic()
            self.challenge_arrived = self.sock.arrived
            self.writer, self.peer, self.mine = writer, str(challenge["nonce"]), new_nonce()
            self.seq_in, self.seq_out = int(challenge["seq"]), 0
            self.hellos(source[0])
            beat = asyncio.ensure_future(self._heartbeats())
            try:
                await self._read(reader)
            except OSError:
                pass
            finally:
                beat.cancel()
                writer.close()
            if self.stopped:
                return
            # Node 0 closed the connection (a send it gave up on): the real member reconnects.
            self.retries += 1
            WHY["closed by node 0"] += 1
            await asyncio.sleep(RETRY)

    async def _connect(
        self, port: int, source: tuple[str, int]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, StampedSocket]:
        """The connect, at most `Light.at_once` of a worker's at a time (--connecting). Its own
        handshake only: the kernel completes it whether node 0 has accepted yet or not, so the
        storm does not wait for node 0. Without the gate, a worker's loop runs all its 2,048
        nodes' connects before it reads any challenge: every hello reached node 0 0.2-0.5 s
        after the last challenge reached its member (node 0 idle meanwhile), where a real node
        answers within its own round trip (docs/performance.md, "Members that answer")."""
        gate = Light.gate
        if gate is None:
            return await asyncio.wait_for(connect(port, source), CONNECT_WAIT)
        async with gate:  # (the member's own 2 s start at its connect, as a real member's)
            return await asyncio.wait_for(connect(port, source), CONNECT_WAIT)

    def hellos(self, host: str) -> None:
        self.send("hello", host=host, daemons_only=False, nonce=self.mine,
                  instance=self.instance, leader=self.leader,
                  started=bool(self.started), version=PROTOCOL)  # fmt: skip

    def beat(self) -> None:
        if Light.progress:  # one rank per member, a step further at each beat
            self.step += 1
            rank = self.node * 8 + self.slot
            report = {"ranks": [[rank, self.step, 1_000_000, 1.0]]}
            self.send("hb", idle=0.0, progress=report)
        else:
            self.send("hb", idle=0.0)

    async def _heartbeats(self) -> None:
        # As marun.job.heartbeat.Beat: at once in a small job, else at a random point of the
        # first interval; then every interval.
        await asyncio.sleep(random.uniform(0.0, self.every - 1.0))
        while True:
            if not self.silent:
                self.beat()
            await asyncio.sleep(self.every)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            line = await reader.readline()
            if not line:
                return
            try:
                body = decode(self.secret, JOB, line)
                self.seq_in = fresh(body, self.mine, self.seq_in)
            except ProtocolError:
                self.refused += 1
                continue
            kind = body["type"]
            if kind == "welcome":
                self.leader = str(body.get("instance", ""))
            elif kind == "start" and not self.started:
                self.started = time.monotonic()
                self.start_arrived = self.sock.arrived if self.sock is not None else 0.0
            elif kind == "stop" and not self.stopped:
                self.stopped = time.monotonic()
                self.stop_arrived = self.sock.arrived if self.sock is not None else 0.0
                self.done.set()
                return


@dataclass
class Result:
    size: str
    members: int
    last_connect_to_started: float = float("nan")
    at_sockets: float = float("nan")  # the same, each end the kernel's arrival time at a socket
    first_try_to_started: float = float("nan")
    first_try_to_last_connect: float = float("nan")  # how long the storm took to arrive
    retries: int = 0
    arrival_cpu: float = float("nan")
    members_cpu: float = float("nan")  # this process's (the light members') during arrival
    steady_share: float = float("nan")
    stop_fanout: float = float("nan")
    stop_arrival: float = float("nan")  # the same to the kernel's arrival at the last socket
    stop_sent: float = float("nan")  # node 0's time in _stop (signing and handing over)
    rss: float = float("nan")
    member_share: float = float("nan")
    every: float = 1.0  # the heartbeat interval of the job
    real_members: int = 1  # in the real process (a node's relay and its slots, or one member)
    detection: float = float("nan")  # --lost: silent member's last line -> node 0's stop
    events: int = 0  # lines in node 0's events file (marun-events.log), the whole run
    note: str = ""


def interval(members: int, peer_timeout: float, beats: float) -> float:
    if _heartbeat is None:
        return 1.0
    if beats > 0:
        _heartbeat.BEATS_PER_SECOND = beats  # type: ignore[misc]
    return _heartbeat.heartbeat_interval(members, peer_timeout)


RELAYED = PROTOCOL >= 3  # the source under test has one connection per node (part 24)


@dataclass
class LightNode(Light):
    """One light node behind its relay (part 24): one connection carrying its `slots` slots (a
    hello each, node 0's welcome to each, its broadcasts once; the slots' heartbeats in one
    `beats` line an interval), as marun.job.relay speaks for a node. Started and stopped when
    its one line of node 0's says so: a real relay hands it on to its slots on the node."""

    slots: int = 8
    welcomed: int = 0
    hub_group: ClassVar[int] = 0  # --hubs: nodes per group (liveness hubs, marun.plan.hubs)
    nodes: ClassVar[int] = 0

    def role(self) -> str:
        """With --hubs: "hub" (a group's first node, past group 0), "child" (the others of such
        a group) or "direct" (group 0, and the last node: the real relay beats node 0 itself)."""
        size = LightNode.hub_group
        if size < 2 or self.node < size or self.node == LightNode.nodes - 1:
            return "direct"
        return "hub" if self.node % size == 0 else "child"

    async def _heartbeats(self) -> None:
        role = self.role()
        if role == "child":  # its beats go to its hub, whose `groupbeats` carry them to node 0
            return
        if role == "hub":
            await asyncio.gather(super()._heartbeats(), self._group_beats())
            return
        await super()._heartbeats()

    async def _group_beats(self) -> None:
        """As a real hub hands on its group's beats: the nodes of its group beat it at random
        points of each interval, and it sends what came every eighth of one; here an eighth of
        its group's nodes in each line, in turn."""
        size, every = LightNode.hub_group, self.every
        group = [n for n in range(self.node + 1, self.node + size) if n < LightNode.nodes - 1]
        await asyncio.sleep(random.uniform(0.0, every / 8))
        turn = 0
        while True:
            part = group[turn % 8 :: 8]
            turn += 1
            if part and not self.silent and PROTOCOL >= 7:  # one entry a node
                self.send("groupbeats", nodes=[[n, [0.0] * self.slots, None, None] for n in part])
            elif part and not self.silent:  # (protocol 6: one a slot)
                entries = [[n, s, 0.0, None, None] for n in part for s in range(self.slots)]
                self.send("groupbeats", beats=entries)
            await asyncio.sleep(every / 8)

    def hellos(self, host: str) -> None:
        said = dict(host=host, daemons_only=False, instance=self.instance, leader=self.leader,
                    started=bool(self.started), version=PROTOCOL)  # fmt: skip
        if PROTOCOL >= 5:  # a relay's slots' hellos of one turn in one line (part 24, round 2)
            self.send("hellos", nonce=self.mine,
                      hellos=[{**said, "slot": slot} for slot in range(self.slots)])  # fmt: skip
            return
        for slot in range(self.slots):
            self.slot = slot
            self.send("hello", nonce=self.mine, **said)
        self.slot = 0

    def beat(self) -> None:
        progress = None
        if Light.progress:
            self.step += 1
            progress = {"ranks": [[self.node * self.slots, self.step, 1_000_000, 1.0]]}
        self.send("beats", beats=[[s, 0.0, None, progress] for s in range(self.slots)])


async def _arrive(lights: list[Light], port: int, deadline: float) -> list[asyncio.Future[None]]:
    tasks = [asyncio.ensure_future(m.run(port, deadline)) for m in lights]
    while time.monotonic() < deadline and not all(m.started for m in lights):
        await asyncio.sleep(0.05)
    return tasks


async def _worker(pipe: Connection, lights: list[Light], port: int) -> None:
    """A process of light members: they connect on `go`, say when all started, then fail one
    of theirs (or silence one) on word from the bench and say when the stop reached them."""
    loop = asyncio.get_running_loop()
    _, deadline = await loop.run_in_executor(None, pipe.recv)
    Light.gate = asyncio.Semaphore(Light.at_once) if Light.at_once > 0 else None
    mine0 = time.process_time()
    tasks = await _arrive(lights, port, deadline)
    started = [m for m in lights if m.started]
    pipe.send({
        "missing": len(lights) - len(started),
        "last_connect": max((m.connected for m in lights), default=0.0),
        "all_started": max((m.started for m in started), default=0.0),
        "last_challenge_arrived": max((m.challenge_arrived for m in lights), default=0.0),
        "last_start_arrived": max((m.start_arrived for m in started), default=0.0),
        "retries": sum(m.retries for m in lights),
        "cpu": time.process_time() - mine0,
        "why": dict(WHY),
    })  # fmt: skip
    command, wait = await loop.run_in_executor(None, pipe.recv)
    others, frozen = lights, None
    if command == "fail":
        failing = lights[0]
        failing.send("failure", failure={"node": failing.node, "exit_code": 3, "why": "x"})
    elif command == "lost":
        frozen = lights[len(lights) // 2]
        frozen.silent = True
        others = [m for m in lights if m is not frozen]
    try:
        await asyncio.wait_for(asyncio.gather(*(m.done.wait() for m in others)), timeout=wait)
        out = {"first": min(m.stopped for m in others), "last": max(m.stopped for m in others),
               "first_arrived": min(m.stop_arrived for m in others),
               "last_arrived": max(m.stop_arrived for m in others)}  # fmt: skip
    except asyncio.TimeoutError:
        out = {"timeout": sum(1 for m in others if not m.stopped)}
    if frozen is not None:
        out["frozen_last"] = frozen.last_sent
    pipe.send(out)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for m in lights:
        if m.writer is not None:
            m.writer.close()


def _worker_main(pipe: Connection, lights: list[Light], port: int) -> None:
    asyncio.run(_worker(pipe, lights, port))


def make_lights(nodes: int, slots: int, every: float) -> list[Light]:
    """Every member but the real ones: all nodes but the last behind relays, else every member
    but the last node's last slot."""
    secret = TOKEN.encode()
    if RELAYED and slots > 1:
        return [LightNode(n, 0, secret, every=every, slots=slots) for n in range(nodes - 1)]
    return [
        Light(n, s, secret, every=every)
        for n in range(nodes)
        for s in range(slots)
        if (n, s) != (nodes - 1, slots - 1)
    ]


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` onto `cpus` (sched_setaffinity moves one thread at a time)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # (a thread that ended meanwhile)
            os.sched_setaffinity(int(task), cpus)


def measure(
    nodes: int, slots: int, steady: float, limit: float, peer_timeout: float, beats: float,
    lost: bool, procs: int, pin_steady: bool = False, hubs: int = 0,
) -> Result:  # fmt: skip
    res = Result(f"{nodes}x{slots}", nodes * slots)
    res.every = interval(nodes * slots, peer_timeout, beats)
    # below the ephemeral range: 8,192 connections of the run before may hold any port of it
    port = free_port()
    events = tempfile.mkdtemp(prefix="bench-node0-events-")  # (removed below)
    env = bench_env({"MARUN_JOB_TOKEN": TOKEN, "BENCH_EVENTS_DIR": events})
    argv = [str(nodes), str(slots), str(port), JOB, str(peer_timeout), str(beats)]
    if hubs:
        argv.append(str(hubs))
    LightNode.hub_group, LightNode.nodes = hubs, nodes
    node0 = subprocess.Popen(
        [sys.executable, "-c", NODE0, *argv],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip  (stderr: a port taken meanwhile is tried again, in main)
    real = None
    workers: list[tuple[multiprocessing.Process, Connection]] = []
    try:
        assert node0.stdout is not None
        if node0.stdout.readline().strip() != "ready":
            res.note = "node 0 did not start"
            return res
        real = subprocess.Popen(
            [sys.executable, "-c", REAL_MEMBER, *argv], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert real.stdout is not None
        if real.stdout.readline().strip() != "ready":
            res.note = "the real member did not connect"
            return res
        res.real_members = slots if RELAYED and slots > 1 else 1
        lights = make_lights(nodes, slots, res.every)
        fork = multiprocessing.get_context("fork")
        for k in range(procs):
            ours, theirs = fork.Pipe()
            proc = fork.Process(target=_worker_main, args=(theirs, lights[k::procs], port))
            proc.start()
            workers.append((proc, ours))
        del lights
        cpu0, drops0 = cpu_seconds(node0.pid), listen_overflows()
        t0 = time.monotonic()
        for _, pipe in workers:
            pipe.send(("go", t0 + limit))
        arrived = [pipe.recv() for _, pipe in workers]
        res.arrival_cpu = cpu_seconds(node0.pid) - cpu0
        res.members_cpu = sum(a["cpu"] for a in arrived)
        res.retries = sum(a["retries"] for a in arrived)
        why: collections.Counter[str] = collections.Counter()
        for a in arrived:
            why.update(a["why"])
        if why:
            res.note = "retries: " + ", ".join(f"{n} {w}" for w, n in why.most_common())
            res.note += f"; listen queue overflows meanwhile: {listen_overflows() - drops0}"
        missing = sum(a["missing"] for a in arrived)
        if missing:
            res.note = f"{missing} light connections not started within {limit:g}s; " + res.note
            return res
        res.last_connect_to_started = max(a["all_started"] for a in arrived) - max(
            a["last_connect"] for a in arrived
        )
        res.at_sockets = max(a["last_start_arrived"] for a in arrived) - max(
            a["last_challenge_arrived"] for a in arrived
        )
        res.first_try_to_started = max(a["all_started"] for a in arrived) - t0
        res.first_try_to_last_connect = max(a["last_connect"] for a in arrived) - t0
        everywhere = os.sched_getaffinity(0)
        apart = pin_steady and len(everywhere) >= 2
        others = (os.getpid(), real.pid, *(proc.pid for proc, _ in workers))
        if apart:  # node 0 alone on a core, as on its own machine; the other nodes on the rest
            own = {max(everywhere)}
            pin(node0.pid, own)
            for pid in others:
                pin(pid, everywhere - own)
        time.sleep(2.0)  # let arrival's last replies settle
        c0, r0, w0 = cpu_seconds(node0.pid), cpu_seconds(real.pid), time.monotonic()
        time.sleep(steady)
        c1, r1, w1 = cpu_seconds(node0.pid), cpu_seconds(real.pid), time.monotonic()
        if apart:
            for pid in (node0.pid, *others):
                pin(pid, everywhere)
        res.steady_share = (c1 - c0) / (w1 - w0)
        res.member_share = (r1 - r0) / (w1 - w0)
        res.rss = rss_mib(node0.pid)
        # Fail-fast: worker 0's first light member reports a rank's failure; node 0 sends `stop`
        # (--lost: one of its members goes silent and keeps its connection, a frozen marun).
        wait = peer_timeout + 60.0 if lost else max(30.0, limit / 4)
        sent, sent_wall = time.monotonic(), time.time()
        for k, (_, pipe) in enumerate(workers):
            pipe.send(("lost" if lost else "fail" if k == 0 else "wait", wait))
        stopped = [pipe.recv() for _, pipe in workers]
        if any("timeout" in out for out in stopped):
            res.note = "stop did not reach every member within the wait"
            return res
        first = min(out["first"] for out in stopped)
        last = max(out["last"] for out in stopped)
        last_arrived = max(out["last_arrived"] for out in stopped)
        if lost:
            res.detection = first - stopped[0]["frozen_last"]
            res.stop_fanout = last - first
            res.stop_arrival = last_arrived - min(out["first_arrived"] for out in stopped)
        else:
            res.stop_fanout = last - sent
            res.stop_arrival = last_arrived - sent_wall
        if select.select([node0.stdout], [], [], 5.0)[0]:
            line = node0.stdout.readline().split()
            if line[:1] == ["stop_sent"]:
                res.stop_sent = float(line[1])
    finally:
        for proc, _ in workers:
            proc.kill()
            proc.join()
        for popen in (real, node0):
            if popen is not None:
                popen.kill()
                popen.wait()
        with contextlib.suppress(OSError):
            res.events = Path(events, "marun-events.log").read_bytes().count(b"\n")
        shutil.rmtree(events, ignore_errors=True)
    return res


def raise_file_limit(need: int) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        try:  # root (in its network namespace, say) may raise the hard limit too
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
            hard = need
        except (ValueError, OSError):
            pass
    want = hard if hard != resource.RLIM_INFINITY else max(soft, need)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    note = (
        f"open files: soft limit raised {soft} -> {want}" if soft < want else f"open files: {soft}"
    )
    if want < need:
        note += f" (below the {need} needed: the largest size will fail)"
    return note


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="64x1,128x8", help="NODESxSLOTS,... (default 64x1,128x8)"
    )
    parser.add_argument(
        "--steady", type=float, default=10.0, help="seconds of steady state measured"
    )
    parser.add_argument("--limit", type=float, default=180.0, help="seconds allowed for arrival")
    parser.add_argument(
        "--peer-timeout", type=float, default=60.0, help="the job's peer_timeout (marun's default)"
    )
    parser.add_argument(
        "--beats-per-second",
        type=float,
        default=0.0,
        help="override marun.job.heartbeat.BEATS_PER_SECOND everywhere (e.g. 1e9: one a second)",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="every heartbeat carries its rank's step (part 21: node 0 aggregates the job's)",
    )
    parser.add_argument(
        "--procs", type=int, default=2, help="processes the light members are spread over"
    )
    parser.add_argument(
        "--connecting",
        type=int,
        default=64,
        help="a light members' process's connects under way at once, the others waiting their "
        "turn (so that it answers the challenges that came meanwhile, as a real node answers "
        "its own); 0: all at once, every answer after the process's last connect",
    )
    parser.add_argument(
        "--pin-steady",
        action="store_true",
        help="in steady state, node 0 alone on one core and every other process on the rest "
        "(as node 0 has its own machine in a job): its figure without the light members' load",
    )
    parser.add_argument(
        "--hubs",
        type=int,
        default=0,
        help="liveness hubs (protocol 6 on): nodes per group; each group past the first beats node "
        "0 through a light hub's `groupbeats` (0: none, every node beats node 0 itself)",
    )
    parser.add_argument(
        "--lost",
        action="store_true",
        help="the stop comes from a member that goes silent (lost-node detection), not a failure",
    )
    args = parser.parse_args()
    sizes = []
    for part in args.sizes.split(","):
        try:
            n, s = (int(x) for x in part.lower().split("x"))
        except ValueError:
            print(
                f"coordination.py: --sizes: {part!r} is not NODESxSLOTS (e.g. 1024x8)",
                file=sys.stderr,
            )
            return 2
        if n < 1 or s < 1:
            print(f"coordination.py: --sizes: {part!r} needs at least 1x1", file=sys.stderr)
            return 2
        sizes.append((n, s))
    print(f"# {load_note()}")
    Light.at_once = max(0, args.connecting)
    source = os.environ.get("MARUN_BENCH_SRC", "this checkout's src")
    shape = "one connection per node (relays)" if RELAYED else "one connection per marun"
    print(
        f"# source: {source}, protocol {PROTOCOL}: {shape}; light members in {args.procs} processes"
        f", {Light.at_once or 'all'} connects under way at once in each"
    )
    # Descriptors a process holds at the largest size: node 0 one per connection, the light
    # members' processes as many between them (one per node behind relays, else one per
    # member), each end a descriptor; 256 for everything else.
    conns = max(n if RELAYED and s > 1 else n * s for n, s in sizes)
    print(f"# {raise_file_limit(conns * 2 + 256)}")
    print(
        f"# steady state over {args.steady:g}s; "
        f"ratios per member against {sizes[0][0]}x{sizes[0][1]}; peer_timeout "
        f"{args.peer_timeout:g}s{'; stop from a lost member' if args.lost else ''}"
        f"{f'; liveness hubs, groups of {args.hubs}' if args.hubs else ''}"
    )
    Light.progress = args.progress
    results = []
    for n, s in sizes:
        for _ in range(5):  # a free port picked may be taken before node 0 binds it: again
            res = measure(n, s, args.steady, args.limit, args.peer_timeout, args.beats_per_second,
                          args.lost, max(1, args.procs), args.pin_steady, args.hubs)  # fmt: skip
            if res.note != "node 0 did not start":
                break
        results.append(res)
        print(f"# {res.size} done{': ' + res.note if res.note else ''}", flush=True)
    base = results[0]
    header = ("size", "members", "last connect -> all started", "the same at the sockets",
              "first try -> all started", "first try -> last connect",
              "retries (per member)", "node 0 CPU arrival", "per member x", "node 0 steady",
              "per member x", "stop to last", "stop at last socket", "node 0's stop", "node 0 RSS",
              "real marun steady (each)",
              "light members' CPU arrival", "heartbeat every", "lost after",
              "node 0's event lines")  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for r in results:
        arr_x = (
            (r.arrival_cpu / r.members) / (base.arrival_cpu / base.members)
            if base.arrival_cpu > 0
            else float("nan")
        )
        st_x = (
            (r.steady_share / r.members) / (base.steady_share / base.members)
            if base.steady_share > 0
            else float("nan")
        )
        row = (r.size, str(r.members), f"{r.last_connect_to_started:.2f} s",
               f"{r.at_sockets:.2f} s",
               f"{r.first_try_to_started:.2f} s", f"{r.first_try_to_last_connect:.2f} s",
               f"{r.retries} ({r.retries / r.members:.2f})",
               f"{r.arrival_cpu:.2f} s",
               f"{arr_x:.2f}", f"{100 * r.steady_share:.1f}% of a core", f"{st_x:.2f}",
               f"{r.stop_fanout:.3f} s", f"{r.stop_arrival:.3f} s", f"{r.stop_sent:.3f} s",
               f"{r.rss:.0f} MiB",
               f"{100 * r.member_share / r.real_members:.2f}% of a core",
               f"{r.members_cpu:.2f} s",
               f"{r.every:g} s",
               "-" if math.isnan(r.detection) else f"{r.detection:.1f} s",
               str(r.events))  # fmt: skip
        print("| " + " | ".join(row) + " |" + (f" {r.note}" if r.note else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
