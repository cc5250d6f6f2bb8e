"""Node 0 alone under the fastest arrival (docs/performance.md, "Members that answer").

bench/coordination.py runs node 0 beside its light members on the same cores, so the storm it
makes is as fast as two processes of Python can connect and answer. This one asks what node 0
does when it is the only bottleneck: every node connects at once (the kernel completes each
handshake from node 0's listen backlog before node 0 accepts), and every node answers its
challenge, with its slots' hellos in one line, at once, between two of node 0's turns (nodes on
machines of their own, infinitely fast). Node 0 is the real Coordinator's port and machine,
turned as its loop turns them (select; up to 256 accepts a wake-up; every ready line read), and
its clock is its own CPU time, so nothing the members do counts.

Per tree it prints node 0's CPU time to the last challenge and to the last start, the window
between them (part 24's goal, every member started within 1 s of the last one connecting, asks
this of node 0's own time), and its turns that had something to do. --base SRC runs another
tree (say, a commit's `git archive` of src) taking turns with this one, and prints this/base.
Run it inside a network namespace of its own (`unshare --net`, then `ip link set lo up`): its
sockets' TIME_WAIT stays there.

    unshare --net sh -c 'ip link set lo up && python bench/arrival_alone.py --rounds 3'
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, load_note

# argv: nodes slots events-dir; prints one JSON line. Written for older trees too (no collector,
# no hubs).
CHILD = """\
import json, os, resource, selectors, socket, sys, time
nodes, slots = map(int, sys.argv[1:3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
from marun.job.coordinator import Coordinator
from marun.job.protocol import PROTOCOL, decode, encode, new_nonce
from marun.log import get_logger, log_to_file
from marun.plan.coordination import Coordination
from marun.sim.ports import free_port
try:
    from marun.job import collector
    begins, ends = collector.arrival_begins, collector.arrival_ends
except ImportError:
    begins = ends = lambda: None
TOKEN, JOB = b"bench-arrival-alone-secret-0123456789", "bench-arrival-alone"
port = free_port()
coord = Coordination(host="127.0.0.1", port=port, nodes=nodes, index=0, job=JOB, slots=slots,
                     arrival_timeout=600.0, peer_timeout=60.0, auth="token")
log_to_file(sys.argv[3])  # node 0's events, as a marun's
events = get_logger("marun.job")
def log(event, level="info", **fields):
    getattr(events, level)(event, **fields)
c = Coordinator(coord, TOKEN, announce=lambda _: None, log=log)  # not started: turned here
port_ = c.port
members = selectors.DefaultSelector()
for n in range(nodes):  # all at once: the kernel holds them until node 0 accepts
    s = socket.socket()
    s.bind((f"127.1.{n // 256}.{n % 256}", 0))
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    members.register(s, selectors.EVENT_READ, [n, s, b""])
begins()  # as the loop does for a large job while it gathers
node0 = 0.0
turns = challenged = started = 0
last_challenge = every_start = 0.0
while started < nodes:
    ready = port_.sel.select(0)
    t = time.process_time()
    for key, mask in ready:
        if key.data is None:
            port_.accept()
        else:
            port_.ready(key.data, mask)
    node0 += time.process_time() - t
    turns += 1 if ready else 0
    for key, _ in members.select(0):  # the members, between node 0's turns: not node 0's time
        member = key.data
        member[2] += member[1].recv(1 << 16)
        while b"\\n" in member[2]:
            line, member[2] = member[2].split(b"\\n", 1)
            body = decode(TOKEN, JOB, line + b"\\n")
            if body["type"] == "challenge":
                challenged += 1
                last_challenge = node0
                said = dict(host=f"h{member[0]}", daemons_only=False, instance=new_nonce(),
                            leader="", started=False, version=PROTOCOL)
                hello = {"job": JOB, "node": member[0], "slot": 0, "type": "hellos",
                         "nonce": new_nonce(), "peer": body["nonce"], "seq": 0,
                         "hellos": [{**said, "slot": k} for k in range(slots)]}
                member[1].sendall(encode(TOKEN, hello))
            elif body["type"] == "start":
                started += 1
                every_start = node0
ends()
print(json.dumps({"last_challenge": last_challenge, "every_start": every_start, "turns": turns,
                  "challenged": challenged}))
"""


def once(src: str, nodes: int, slots: int) -> dict[str, float]:
    env = bench_env()
    env["PYTHONPATH"] = src
    with tempfile.TemporaryDirectory(prefix="bench-arrival-alone-") as events:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(nodes), str(slots), events],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if out.returncode != 0:
        raise SystemExit(f"arrival_alone.py: the run of {src} failed: {out.stderr.strip()[-400:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default="", help="another tree's src/, run taking turns")
    args = parser.parse_args()
    if args.nodes < 2 or args.slots < 1 or args.rounds < 1:
        print("arrival_alone.py: needs --nodes >= 2, --slots >= 1, --rounds >= 1", file=sys.stderr)
        return 2
    this = os.environ.get("MARUN_BENCH_SRC", str(Path(__file__).resolve().parents[1] / "src"))
    trees = [("this", this)] + ([("base", args.base)] if args.base else [])
    print(f"# {load_note()}")
    print(f"# {args.nodes} x {args.slots}, all at once, answered at once; node 0's CPU time")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, src in trees:
            runs[name].append(once(src, args.nodes, args.slots))
    header = ("tree", "to the last challenge", "to the last start", "the window", "turns")
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for name, src in trees:
        got = runs[name]
        row = (
            f"{name} ({src})",
            ", ".join(f"{r['last_challenge']:.3f}" for r in got) + " s",
            ", ".join(f"{r['every_start']:.3f}" for r in got) + " s",
            ", ".join(f"{r['every_start'] - r['last_challenge']:.3f}" for r in got) + " s",
            ", ".join(str(int(r["turns"])) for r in got),
        )
        print("| " + " | ".join(row) + " |")
    if args.base:
        ratio = statistics.median(r["every_start"] for r in runs["this"]) / statistics.median(
            r["every_start"] for r in runs["base"]
        )
        print(f"# node 0's CPU to the last start, this / base (medians): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
