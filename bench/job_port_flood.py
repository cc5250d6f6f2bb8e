"""What a flood on node 0's job port costs it (docs/supervision.md, "Limits"): a coordinator of
a 3-node job in a child process; N connections from 20 loopback addresses, each sending 1 MB
without a newline; then a loop of garbage lines for 10 s. Prints node 0's RSS before and after,
its CPU time, the connections it answered, and how many log lines the refusals cost.

    python bench/job_port_flood.py [--connections 200]
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import time

CHILD = """\
import resource, sys, time
from marun.job.coordinator import Coordinator
from marun.plan.coordination import Coordination
lines = 0
def log(event, level="info", **kw):
    global lines
    lines += 1
def rss():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) // 1024 for l in fh if l.startswith("VmRSS:"))
c = Coordinator(Coordination(host="127.0.0.1", port=int(sys.argv[1]), nodes=3, index=0,
                             job="j"), b"k", log=log, announce=lambda _: None).start()
print("rss", rss(), flush=True)
for line in sys.stdin:
    print(line.strip(), "rss", rss(), "cpu", round(time.process_time(), 2), "log_lines", lines,
          "refused", c.refused, flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=200)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin and child.stdout
    print("node 0 at start:", child.stdout.readline().strip(), "MB")
    socks = []
    mb = b"x" * (1 << 20)
    answered = 0
    for i in range(args.connections):
        sock = socket.socket()
        sock.bind((f"127.0.2.{i % 20 + 1}", 0))
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", port))
            answered += bool(sock.recv(4096))
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.send(mb)
        except OSError:
            pass
        socks.append(sock)
    time.sleep(1)
    child.stdin.write(f"after {args.connections} x 1 MB:\n")
    child.stdin.flush()
    print(child.stdout.readline().strip(), f"answered {answered}")
    for sock in socks:
        sock.close()
    garbage = 0
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.recv(4096)
                sock.sendall(b"garbage\n")
                sock.recv(10)
                garbage += 1
        except OSError:
            time.sleep(0.01)
    time.sleep(1)
    child.stdin.write(f"after {garbage} garbage lines in 10 s:\n")
    child.stdin.flush()
    print(child.stdout.readline().strip())
    child.stdin.close()
    child.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
