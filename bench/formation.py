"""MPI cluster formation at N peers, through the real code path: names in a hosts file (a
private /etc/hosts, bind-mounted in a mount namespace of this bench's own), one real sshd on
0.0.0.0 answering every peer's loopback address 127.1.x.y (Linux answers all of 127/8 without
adding addresses), each peer's SSH identification read and the ssh login mpirun will use tried
on the first `LOGINS` peers. Two baselines, in the same run, with the same functions:
- a login to every peer, one by one (resolve, port, `ssh ... true`): what a serial launcher does
  (run_mpi.sh, a horovodrun-style check loop), and what marun's formation did before;
- formation's own checks one by one (resolve, SSH identification, the same logins): how much of
  the gain is the pool rather than the cheaper check.
In the namespace ~/.bashrc is hidden: every login runs the user's shell, whose start-up is the
image's cost, not marun's.

Needs root (unshare, mount), sshd and ssh; prints why it skips otherwise.

    python bench/formation.py [--small] [--peers 1000] [--serial-sample 0]
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, Row, load_note, ms, print_rows, standard_args

SSH_OPTIONS = ["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o",
               "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"]  # fmt: skip
# The options marun's MPI plan gives mpirun (planner.ssh_options), less the key.


def _peer_address(i: int) -> str:
    return f"127.1.{i // 250}.{i % 250 + 1}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def missing_tools() -> str | None:
    if os.getuid() != 0:
        return "needs root (a mount namespace for /etc/hosts and sshd's /run/sshd)"
    for tool in ("unshare", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not (shutil.which("sshd") or os.path.exists("/usr/sbin/sshd")):
        return "sshd not found"
    return None


def inner(work: Path, peers: int, serial: int, extra: list[str]) -> dict[str, float]:
    """In the namespace: start sshd, form the cluster, then check peers one by one."""
    import pwd

    sys.path.insert(0, os.environ.get("MARUN_BENCH_SRC", str(REPO / "src")))
    from marun.mpi.formation import LOGINS, Formation, probe_port, probe_ssh, resolve_ipv4_once
    from marun.mpi.sshd_config import render_sshd_config

    port = _free_port()
    (work / "sshd_config").write_text(
        render_sshd_config(port=port, host_key=str(work / "host"), pid_file=str(work / "pid"),
                           authorized_keys=(str(work / "client.pub"),), hosts=peers + 1,
                           user=pwd.getpwuid(os.getuid()).pw_name, listen_address="0.0.0.0")
    )  # fmt: skip
    sshd_bin = shutil.which("sshd") or "/usr/sbin/sshd"
    log = open(work / "sshd.log", "w")  # noqa: SIM115
    hosts = ["node-0"] + [f"peer-{i}" for i in range(1, peers + 1)]
    ssh = ["ssh", "-p", str(port), "-i", str(work / "client"), *SSH_OPTIONS, *extra]
    sshd = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(work / "sshd_config")], stderr=log)
    try:
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.01)
        # Every peer ready: formation against the same peers checked one by one.
        start = time.perf_counter()
        addresses = Formation(hosts, port, ssh, 600).run()
        parallel = time.perf_counter() - start
        assert addresses[1:] == [_peer_address(i) for i in range(1, peers + 1)], addresses[:3]
        start = time.perf_counter()
        count = serial or peers
        for name in hosts[1 : count + 1]:
            address = resolve_ipv4_once(name)
            probe_port(address, port, 2.0)
            subprocess.run([*ssh, address, "true"], check=True, stdin=subprocess.DEVNULL)
        one_by_one = (time.perf_counter() - start) * peers / count
        start = time.perf_counter()
        for i, name in enumerate(hosts[1:]):
            address = resolve_ipv4_once(name)
            probe_ssh(address, port, 2.0)
            if i < LOGINS:
                subprocess.run([*ssh, address, "true"], check=True, stdin=subprocess.DEVNULL)
        own_one_by_one = time.perf_counter() - start
        # The last peer ready last: its name appears in DNS (here: the hosts file, rewritten in
        # place) once every other peer is in; from that moment to formation's end (what node 0
        # does next is write the hostfile and start mpirun).
        import threading

        text = (work / "hosts").read_text()
        last = text.splitlines()[-1] + "\n"
        with open(work / "hosts", "w") as fh:  # the same inode: the bind mount sees it
            fh.write(text[: -len(last)])
        late = Formation(hosts, port, ssh, 600)
        ended: list[float] = []
        thread = threading.Thread(target=lambda: (late.run(), ended.append(time.monotonic())))
        thread.start()
        while late.ready_count() < peers:
            time.sleep(0.01)
        time.sleep(0.3)
        with open(work / "hosts", "a") as fh:
            fh.write(last)
        appeared = time.monotonic()
        thread.join()
        latency = ended[0] - appeared
        return {
            "parallel": parallel,
            "serial": one_by_one,
            "own_serial": own_one_by_one,
            "sampled": count,
            "latency": latency,
            "logins": min(LOGINS, peers),
        }
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)
        log.close()


def _inner_run(work: Path, peers: int, serial: int, extra: list[str]) -> dict[str, float]:
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    for name in ("host", "client"):
        if not (work / name).exists():
            subprocess.run([*keygen, "-f", str(work / name)], check=True)
    lines = ["127.0.0.1 localhost node-0"]
    lines += [f"{_peer_address(i)} peer-{i}" for i in range(1, peers + 1)]
    (work / "hosts").write_text("\n".join(lines) + "\n")
    script = (
        "mount -t tmpfs -o mode=755 marun-bench-run /run && mkdir /run/sshd && "
        f"mount --bind {work / 'hosts'} /etc/hosts && "
        # Each login runs the user's shell, which reads ~/.bashrc under sshd: that is the
        # image's cost, not marun's (pyenv's init on a dev box: ~200 ms a login).
        '{ [ ! -f "$HOME/.bashrc" ] || mount --bind /dev/null "$HOME/.bashrc"; } && '
        'exec "$@"'
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
         sys.executable, __file__, "--inner", str(work), str(peers), str(serial), *extra],
        check=False, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        if last.startswith(("unshare:", "mount:", "mkdir:")):
            raise Skip(f"no private mount namespace here ({last})")
        raise SystemExit(f"formation bench failed (exit {done.returncode}):\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class Skip(Exception):
    """What this machine lacks to run the bench."""


def run(
    small: bool,
    runs: int,
    peers: int | None = None,
    serial: int = 0,
    latency_peers: list[int] | None = None,
    kex: bool = False,
) -> list[Row]:
    peers = peers or (8 if small else 1000)
    serial = serial or (4 if small else 0)
    latency_peers = latency_peers or ([4] if small else [4, 16, 64])
    why = missing_tools()
    if why:
        return [Row("formation", f"{peers} peers", f"skipped: {why}", "-", "-", "-", None)]
    extra = ["-o", "KexAlgorithms=curve25519-sha256"] if kex else []
    try:
        return _measure(runs, peers, serial, latency_peers, extra, kex)
    except Skip as exc:
        return [Row("formation", f"{peers} peers", f"skipped: {exc}", "-", "-", "-", None)]


def _measure(
    runs: int, peers: int, serial: int, latency_peers: list[int], extra: list[str], kex: bool
) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="marun-formation-") as tmp:
        work = Path(tmp)
        for n in latency_peers:
            got = [_inner_run(work, n, min(n, 2), extra)["latency"] for _ in range(max(1, runs))]
            got.sort()
            latency = got[len(got) // 2]
            rows.append(Row("formation", f"{n} peers: last peer ready -> formed", ms(latency),
                            "-", "-", "<= 1 s, flat", latency <= 1.0))  # fmt: skip
        results = sorted(
            (_inner_run(work, peers, serial, extra) for _ in range(max(1, runs))),
            key=lambda r: r["parallel"],
        )
    mid = results[len(results) // 2]
    par, ser, own = mid["parallel"], mid["serial"], mid["own_serial"]
    sampled = (
        ""
        if mid["sampled"] == peers
        else f" (x{peers / mid['sampled']:.0f} of {mid['sampled']:.0f})"
    )
    goal = ">= 30x" if peers >= 1000 else "-"
    kex_note = ", curve25519 kex" if kex else ""
    what = (
        f"{peers} peers ready (resolve, SSH identification, {mid['logins']:.0f} logins{kex_note})"
    )
    rows.append(
        Row("formation", what, ms(par), f"{ms(ser)}: a login to each, one by one{sampled}",
            f"{ser / par:.1f}x faster", goal, ser / par >= 30 if peers >= 1000 else None)
    )  # fmt: skip
    rows.append(
        Row("formation", f"{peers} peers, the same checks", ms(par), f"{ms(own)} one by one",
            f"{own / par:.1f}x faster", "-", None)
    )  # fmt: skip
    return rows


def main() -> None:
    if sys.argv[1:2] == ["--inner"]:
        work, peers, serial = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(inner(work, peers, serial, sys.argv[5:])))
        return
    parser = standard_args(__doc__, 1)
    parser.add_argument("--peers", type=int, default=None, help="default 1000 (8 with --small)")
    parser.add_argument(
        "--serial-sample",
        type=int,
        default=0,
        help="check only this many peers one by one and scale (0: all)",
    )
    parser.add_argument("--latency-peers", default=None, help="comma list, default 4,16,64")
    parser.add_argument(
        "--kex",
        action="store_true",
        help="ssh with -o KexAlgorithms=curve25519-sha256 (not marun's default)",
    )
    args = parser.parse_args()
    latency = [int(n) for n in args.latency_peers.split(",")] if args.latency_peers else None
    rows = run(args.small, args.runs, args.peers, args.serial_sample, latency, args.kex)
    print(f"median of {args.runs} runs, {load_note()}")
    print_rows(rows)


if __name__ == "__main__":
    main()
