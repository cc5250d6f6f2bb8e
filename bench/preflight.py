"""The preflight's cost (docs/preflight.md, "Cost"): the per-node checks, one probe of a link,
and a ring of N nodes probing at once, all on this machine's loopback (node n's listener on
127.1.x.y, as one pod each). Nothing is asserted.

Per run it prints the median and the worst of `--repeat` runs of: `run_node_checks` for a plan
of 8 processes (devices, /dev/shm, disk, interfaces, a port, this node's address and name),
one `probe_link` over loopback, and a ring of `--nodes` listeners, each probed by the previous
node's client in a thread of its own, all at once (the ring's wall time, as the barrier would
wait for it), with node 0's decision over the links.

    python bench/preflight.py                  # 64 nodes
    python bench/preflight.py --nodes 256 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from marun.preflight.checks import NodeNeeds, run_node_checks
from marun.preflight.decide import decide
from marun.preflight.result import LinkResult, NodeReport
from marun.preflight.ring import ProbeListener, probe_link

JOB = "bench.preflight"


def _address(n: int) -> str:
    return f"127.1.{n // 250}.{n % 250 + 1}"


def _checks() -> float:
    needs = NodeNeeds(
        host="localhost",
        address="127.0.0.1",
        device_kind="gpu",
        devices=0,
        processes=8,
        dirs=(("logs", "."), ("work dir", ".")),
        ifnames=(("NCCL_SOCKET_IFNAME", "lo"), ("GLOO_SOCKET_IFNAME", "lo")),
        ports=(("MASTER_PORT", 29500),),
    )
    start = time.perf_counter()
    run_node_checks(needs)
    return time.perf_counter() - start


def _one_probe() -> float:
    with ProbeListener(JOB, host="127.0.0.1") as listener:
        start = time.perf_counter()
        link = probe_link((0, "a"), (1, "b"), "127.0.0.1", listener.port, JOB)
        took = time.perf_counter() - start
    assert link.reachable, link.error
    return took


def _ring(nodes: int) -> tuple[float, str]:
    listeners = [ProbeListener(JOB, host=_address(n)) for n in range(nodes)]
    ports = [listener.start() for listener in listeners]
    links: list[LinkResult] = []
    lock = threading.Lock()

    def probe(n: int) -> None:
        m = (n + 1) % nodes
        link = probe_link((n, f"h{n}"), (m, f"h{m}"), _address(m), ports[m], JOB)
        with lock:
            links.append(link)

    threads = [threading.Thread(target=probe, args=(n,)) for n in range(nodes)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - start
    for listener in listeners:
        listener.close()
    reports = {n: NodeReport(n, f"h{n}", _address(n), ports[n]) for n in range(nodes)}
    decision = decide("on", reports, links, nodes)
    return took, f"{decision.action} ({len(decision.findings)} finding(s))"


def _line(what: str, values: list[float]) -> str:
    return (
        f"{what}: median {statistics.median(values) * 1e3:.1f} ms, worst {max(values) * 1e3:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(_line("per-node checks", [_checks() for _ in range(args.repeat)]))
    print(_line("one probe (loopback)", [_one_probe() for _ in range(args.repeat)]))
    rings = [_ring(args.nodes) for _ in range(args.repeat)]
    print(_line(f"ring of {args.nodes} at once", [t for t, _ in rings]))
    print(f"decisions: {sorted({d for _, d in rings})}")


if __name__ == "__main__":
    main()
