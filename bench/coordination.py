"""The job's coordination at scale (docs/performance.md, "The job's coordination at scale").

Node 0's real Coordinator (marun.job.coordinator) runs in a child process of its own; N x S light
members speak its wire protocol (challenge, signed hello with the member's nonce, signed
heartbeats with sequence numbers every second, start/stop) from one asyncio loop in this
process, so the members' cost is not node 0's. One slot of the job is a real member
(marun.job.member.Member) in a third process, whose own CPU is measured too. Everything runs on
loopback; node n's members connect from 127.1.x.y (one address per node, as one pod each).

The job has a secret (MARUN_JOB_TOKEN-style), so every line is HMAC-signed and checked. Node 0's
log is a no-op here (a real marun writes a node_arrived line per member; not counted).

Per size it prints: the time from the last member's connect to every member started (and from
the first connect attempt), connection retries (connect or challenge not within 2 s, as the real
member retries), node 0's CPU seconds during arrival, node 0's CPU share of one core in steady
state (over --steady seconds), the stop fan-out (one member sends a failure: time to the last
member's `stop`), node 0's RSS, and the real member's CPU share in steady state. Ratios are per
member against the first size of the run (1.00 = linear in members). Nothing is asserted.

The soft limit on open files is raised to the hard limit (each side holds one descriptor per
member).

    python bench/coordination.py                       # 64x1, 128x8
    python bench/coordination.py --sizes 1024x1,512x8,1024x8 --steady 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, load_note

sys.path.insert(
    0, os.environ.get("MARUN_BENCH_SRC", str(Path(__file__).resolve().parents[1] / "src"))
)
from marun.job.protocol import ProtocolError, decode, encode, fresh, new_nonce

JOB = "bench-coordination"
TOKEN = "bench-coordination-secret-0123456789"
CONNECT_WAIT = 2.0  # the real member's: create_connection and the challenge within 2 s
RETRY = 0.5  # the real member's pause between tries

NODE0 = """\
import os, sys
from marun.job.coordinator import Coordinator
from marun.plan.coordination import Coordination
nodes, slots, port = map(int, sys.argv[1:4])
coord = Coordination(host="127.0.0.1", port=port, nodes=nodes, index=0, job=sys.argv[4],
                     slots=slots, arrival_timeout=600.0, peer_timeout=120.0, auth="token")
c = Coordinator(coord, os.environ["MARUN_JOB_TOKEN"].encode(), announce=lambda _: None).start()
print("ready", flush=True)
sys.stdin.read()
"""

REAL_MEMBER = """\
import os, sys, time
from marun.job.member import Member
from marun.plan.coordination import Coordination
nodes, slots, port = map(int, sys.argv[1:4])
coord = Coordination(host="127.0.0.1", port=port, nodes=nodes, index=nodes - 1, job=sys.argv[4],
                     slots=slots, slot=slots - 1, arrival_timeout=600.0, peer_timeout=120.0,
                     auth="token")
m = Member(coord, os.environ["MARUN_JOB_TOKEN"].encode(), "127.0.0.1")
end = time.monotonic() + 60
while m._sock is None and time.monotonic() < end:  # connected (bench only: a private field)
    time.sleep(0.05)
print("ready" if m._sock is not None else "not connected", flush=True)
sys.stdin.read()
"""


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


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Light:
    """One light member: the real member's wire protocol, no supervisor behind it."""

    node: int
    slot: int
    secret: bytes
    connected: float = 0.0  # monotonic: this member's last successful connect
    started: float = 0.0
    stopped: float = 0.0
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

    def send(self, kind: str, **fields: object) -> None:
        body = {"job": JOB, "node": self.node, "slot": self.slot, "type": kind, **fields}
        body.update(peer=self.peer, seq=self.seq_out)
        self.seq_out += 1
        assert self.writer is not None
        self.writer.write(encode(self.secret, body))

    async def run(self, port: int, deadline: float) -> None:
        source = (f"127.1.{self.node // 256}.{self.node % 256}", 0)
        while time.monotonic() < deadline:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, local_addr=source), CONNECT_WAIT
                )
            except (OSError, asyncio.TimeoutError):
                self.retries += 1
                await asyncio.sleep(RETRY)
                continue
            try:
                line = await asyncio.wait_for(reader.readline(), CONNECT_WAIT)
                challenge = decode(self.secret, JOB, line)
            except (OSError, asyncio.TimeoutError, ProtocolError):
                self.retries += 1
                writer.close()
                await asyncio.sleep(RETRY)
                continue
            self.connected = time.monotonic()
            self.writer, self.peer, self.mine = writer, str(challenge["nonce"]), new_nonce()
            self.seq_in, self.seq_out = int(challenge["seq"]), 0
            self.send("hello", host=source[0], daemons_only=False, nonce=self.mine,
                      instance=self.instance, leader=self.leader,
                      started=bool(self.started))  # fmt: skip
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
            await asyncio.sleep(RETRY)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.send("hb", idle=0.0)

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
            elif kind == "stop" and not self.stopped:
                self.stopped = time.monotonic()
                self.done.set()
                return


@dataclass
class Result:
    size: str
    members: int
    last_connect_to_started: float = float("nan")
    first_try_to_started: float = float("nan")
    retries: int = 0
    arrival_cpu: float = float("nan")
    members_cpu: float = float("nan")  # this process's (the light members') during arrival
    steady_share: float = float("nan")
    stop_fanout: float = float("nan")
    rss: float = float("nan")
    member_share: float = float("nan")
    note: str = ""


async def measure(nodes: int, slots: int, steady: float, limit: float) -> Result:
    res = Result(f"{nodes}x{slots}", nodes * slots)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = bench_env({"MARUN_JOB_TOKEN": TOKEN})
    argv = [str(nodes), str(slots), str(port), JOB]
    node0 = subprocess.Popen(
        [sys.executable, "-c", NODE0, *argv],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip  (stderr: a port taken meanwhile is tried again, in main)
    real = None
    lights: list[Light] = []
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
        secret = TOKEN.encode()
        lights = [
            Light(n, s, secret)
            for n in range(nodes)
            for s in range(slots)
            if (n, s) != (nodes - 1, slots - 1)
        ]
        cpu0, mine0 = cpu_seconds(node0.pid), time.process_time()
        t0 = time.monotonic()
        deadline = t0 + limit
        tasks = [asyncio.ensure_future(m.run(port, deadline)) for m in lights]
        while time.monotonic() < deadline and not all(m.started for m in lights):
            await asyncio.sleep(0.05)
        res.arrival_cpu = cpu_seconds(node0.pid) - cpu0
        res.members_cpu = time.process_time() - mine0
        res.retries = sum(m.retries for m in lights)
        if not all(m.started for m in lights):
            missing = sum(1 for m in lights if not m.started)
            res.note = f"{missing} members not started within {limit:g}s"
            return res
        last_connect = max(m.connected for m in lights)
        all_started = max(m.started for m in lights)
        res.last_connect_to_started = all_started - last_connect
        res.first_try_to_started = all_started - t0
        await asyncio.sleep(2.0)  # let arrival's last replies settle
        c0, r0, w0 = cpu_seconds(node0.pid), cpu_seconds(real.pid), time.monotonic()
        await asyncio.sleep(steady)
        c1, r1, w1 = cpu_seconds(node0.pid), cpu_seconds(real.pid), time.monotonic()
        res.steady_share = (c1 - c0) / (w1 - w0)
        res.member_share = (r1 - r0) / (w1 - w0)
        res.rss = rss_mib(node0.pid)
        # Fail-fast: the first light member reports a rank's failure; node 0 sends `stop`.
        failing = lights[0]
        sent = time.monotonic()
        failing.send("failure", failure={"node": failing.node, "exit_code": 3, "why": "bench"})
        await asyncio.wait_for(
            asyncio.gather(*(m.done.wait() for m in lights)), timeout=max(30.0, limit / 4)
        )
        res.stop_fanout = max(m.stopped for m in lights) - sent
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    except asyncio.TimeoutError:
        res.note = "stop did not reach every member within the wait"
    finally:
        for m in lights:
            if m.writer is not None:
                m.writer.close()
        for proc in (real, node0):
            if proc is not None:
                proc.kill()
                proc.wait()
    return res


def raise_file_limit(need: int) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
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
    print(f"# {raise_file_limit(max(n * s for n, s in sizes) * 2 + 256)}")
    print(
        f"# steady state over {args.steady:g}s; "
        f"ratios per member against {sizes[0][0]}x{sizes[0][1]}"
    )
    results = []
    for n, s in sizes:
        for _ in range(5):  # a free port picked may be taken before node 0 binds it: again
            res = asyncio.run(measure(n, s, args.steady, args.limit))
            if res.note != "node 0 did not start":
                break
        results.append(res)
        print(f"# {res.size} done{': ' + res.note if res.note else ''}", flush=True)
    base = results[0]
    header = ("size", "members", "last connect -> all started", "first try -> all started",
              "retries", "node 0 CPU arrival", "per member x", "node 0 steady", "per member x",
              "stop to last", "node 0 RSS", "real member steady",
              "light members' CPU arrival")  # fmt: skip
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
               f"{r.first_try_to_started:.2f} s", str(r.retries), f"{r.arrival_cpu:.2f} s",
               f"{arr_x:.2f}", f"{100 * r.steady_share:.1f}% of a core", f"{st_x:.2f}",
               f"{r.stop_fanout:.3f} s", f"{r.rss:.0f} MiB",
               f"{100 * r.member_share:.2f}% of a core", f"{r.members_cpu:.2f} s")  # fmt: skip
        print("| " + " | ".join(row) + " |" + (f" {r.note}" if r.note else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
